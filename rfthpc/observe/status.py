"""`rfthpc status RUN_DIR`: the run's jobs and their Slurm states, trainer progress, store counts, explorers.

Everything is read, nothing is changed, and nothing can hang: Slurm is asked with timeouts
(sacct, or squeue where accounting is off), and a Slurm that does not answer leaves the job
states "unknown" while the rest of the report (all from the run directory) is still shown.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from rfthpc.errors import UserError
from rfthpc.launch.job_states import STATE_TIMEOUT_S, TaskState, query_states
from rfthpc.observe.timeline import role_spans, shares
from rfthpc.rundir.explorer_meta import FINAL_STATES, ExplorerProgress, read_progress
from rfthpc.rundir.jobs import JobRecord, read_jobs
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.servers import read_addresses
from rfthpc.rundir.trainer_meta import TrainerMeta, read_trainer_meta
from rfthpc.sharedfs.fileops import is_temporary
from rfthpc.sharedfs.mounts import describe
from rfthpc.weights.published import read_latest

TIME_WINDOW_S = 300.0
"""How far back `rfthpc status` looks for each role's time shares."""


def _lock_kind(run: RunDir) -> str | None:
    """The run's `filesystem.lock_type`, from its recorded config (None if it cannot be read)."""
    try:
        cfg = yaml.safe_load(run.config.read_text())
    except (OSError, yaml.YAMLError):
        return None
    fs = cfg.get("filesystem") if isinstance(cfg, dict) else None
    return fs.get("lock_type") if isinstance(fs, dict) else None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def explorer_progress(run_dir: RunDir) -> dict[str, list[ExplorerProgress]]:
    """Per explorer name, the progress records of its ranks (`explorer_meta/<name>/<rank>.json`)."""
    root = run_dir.explorer_meta_root
    out: dict[str, list[ExplorerProgress]] = {}
    if not root.is_dir():
        return out
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not is_temporary(p.name)):
        ranks = [r for f in d.glob("*.json") if not is_temporary(f.name) and (r := read_progress(f)) is not None]
        out[d.name] = sorted(ranks, key=lambda r: r.rank)
    return out


def _process_ended(host: str, pid: int) -> bool:
    """True if `pid` ran on this host and is gone (another host's processes cannot be looked at)."""
    if host != socket.gethostname() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's (a reused pid)
        return False
    return False


def _newest_task(jobs: Sequence[dict[str, Any]], runs: Callable[[JobRecord], bool],
                 task_id: Callable[[JobRecord], str]) -> TaskState | None:
    """The Slurm state of `task_id(record)` in the newest job record that `runs` the role."""
    for job in reversed(jobs):
        r: JobRecord = job["record"]
        if runs(r):
            return next((t for t in job["tasks"] if t.job_id == task_id(r)), None)
    return None


def explorer_task(jobs: Sequence[dict[str, Any]], name: str, rank: int) -> TaskState | None:
    """The Slurm state of the array task (or hetjob component) that runs explorer `name`'s `rank`."""
    return _newest_task(jobs, lambda r: name in r.explorer_names(),
                        lambda r: {"explorer": f"{r.job_id}_{rank}", "hetjob": f"{r.job_id}+1"}.get(r.role, r.job_id))


def trainer_task(jobs: Sequence[dict[str, Any]]) -> TaskState | None:
    """The Slurm state of the newest job that runs the trainer (a hetjob's component 0)."""
    return _newest_task(jobs, JobRecord.runs_trainer,
                        lambda r: f"{r.job_id}+0" if r.role == "hetjob" else r.job_id)


def _ended(task: TaskState | None, host: str, pid: int) -> str | None:
    """Why a process that reported no end is gone: its Slurm task ended, or (on this host) the process."""
    if task is not None and task.terminal:
        return f"job {task.job_id} {task.state}"
    if _process_ended(host, pid):
        return f"process {pid} ended"
    return None


def why_gone(progress: ExplorerProgress, task: TaskState | None, now: float) -> str | None:
    """Why an explorer rank that has not reported its end is not running any more; None if it may be.

    Its Slurm task ended (cancelled, failed, out of time or memory, its node lost), its process on
    this host is gone (`rfthpc run`), or it missed its heartbeats for a whole lease.
    """
    if progress.final:
        return None
    ended = _ended(task, progress.host, progress.pid)
    if ended is not None:
        return ended
    if progress.expired(now):
        return f"no heartbeat for {progress.age_s(now):.0f} s (lease {progress.lease_s:.0f} s)"
    return None


def trainer_gone(meta: TrainerMeta, task: TaskState | None) -> str | None:
    """Why a trainer that did not report its end is not running any more; None if it may be."""
    return _ended(task, meta.host, meta.pid) if meta.state == "training" else None


def collect_status(run_dir: Path, timeout_s: float = STATE_TIMEOUT_S) -> dict[str, Any]:
    """Everything `rfthpc status` shows, as plain data."""
    run = RunDir(run_dir)
    if not run.root.is_dir():
        raise UserError(f"run directory {run.root} does not exist; give the directory `rfthpc submit` printed")
    if not run.jobs.exists() and not run.config.exists() and not (run.root / "explorers").is_dir():
        raise UserError(f"{run.root} is not a run directory (no config.yaml, no jobs.jsonl)")
    records = read_jobs(run)
    states, slurm_error = query_states([r.job_id for r in records], timeout_s)
    meta = read_trainer_meta(run)
    store: dict[str, Any] | None = None
    store_error: str | None = None
    try:
        from rfthpc.store import inspect_store

        store = inspect_store(run.root)
    except UserError as e:
        store_error = str(e)
    status = {
        "run_dir": str(run.root),
        "time": time.time(),
        "jobs": [{"record": r, "tasks": states.get(r.job_id, [])} for r in records],
        "slurm_error": slurm_error,
        "trainer": {} if meta is None else dataclasses.asdict(meta),
        "latest_checkpoint": _read_int(run.latest_checkpoint_file),
        "latest_weights": read_latest(run.root),
        "store": store,
        "store_error": store_error,
        "explorers": {name: [dataclasses.asdict(p) for p in ranks] for name, ranks in explorer_progress(run).items()},
        "time_shares": {role: shares(spans, TIME_WINDOW_S) for role, spans in role_spans(run).items()},
        "servers": server_addresses(run),
        "filesystem": dict(zip(("mount", "notes"), describe(run.root, _lock_kind(run)), strict=True)),
    }
    judge_liveness(status)
    return status


def server_addresses(run: RunDir) -> dict[str, list[dict[str, Any]]]:
    """The published address of every engine of every shared auxiliary model, without its API key."""
    out = {}
    for folder in sorted(run.servers.glob("*")) if run.servers.is_dir() else []:
        found = read_addresses(run.root, folder.name)
        if found:
            out[folder.name] = [{k: v for k, v in dataclasses.asdict(a).items() if k != "api_key"} for a in found]
    return out


def judge_liveness(status: dict[str, Any]) -> None:
    """Set `gone` (why it is not running any more, or None) on the trainer and every explorer rank of
    `status`, from their records and the Slurm states of its jobs."""
    jobs, now = status["jobs"], status["time"]
    trainer = TrainerMeta.from_dict(status["trainer"]) if status["trainer"] else None
    if trainer is not None:
        status["trainer"]["gone"] = trainer_gone(trainer, trainer_task(jobs))
    for name, ranks in status["explorers"].items():
        for p in ranks:
            progress = ExplorerProgress.from_dict(p)
            p["gone"] = None if progress is None else why_gone(progress, explorer_task(jobs, name, progress.rank), now)


def _fmt(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [headers] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def _age(now: float, then: Any) -> str:
    return f"{now - float(then):.0f} s ago" if isinstance(then, (int, float)) else "-"


def format_status(d: dict[str, Any]) -> str:
    """The status report as readable text."""
    now = d["time"]
    lines = [f"run {d['run_dir']}", f"filesystem: {d['filesystem']['mount']}"]
    lines += [f"  note: {note}" for note in d["filesystem"]["notes"]]
    lines.append("")
    rows = []
    for job in d["jobs"]:
        r: JobRecord = job["record"]
        if r.role == "explorer":
            who = r.explorer
        elif r.role == "server":
            who = f"auxiliary model {r.server}"
        else:
            who = "trainer + " + str(r.explorer) if r.role in ("hetjob", "colocated") else "trainer"
        tasks = job["tasks"] or [TaskState(r.job_id, "UNKNOWN" if d["slurm_error"] else "NOT FOUND")]
        for t in tasks:
            rows.append([r.role, who, t.job_id, t.state, t.elapsed, t.nodes, t.reason])
    if rows:
        lines.append("jobs")
        lines += _table(["role", "runs", "job", "state", "elapsed", "nodes", "reason"], rows)
    else:
        lines.append("jobs: none recorded in jobs.jsonl")
    if d["slurm_error"]:
        lines.append(f"  (Slurm did not answer: {d['slurm_error']})")
    lines.append("")
    t = d["trainer"]
    if t:
        if t.get("gone"):
            end = f" — gone: {t['gone']}"
        else:
            end = "" if t.get("state", "training") == "training" else f" — {t['state']}"
        lines.append(
            f"trainer: step {_fmt(t.get('step'))} (stage {_fmt(t.get('stage'))}), published version "
            f"{_fmt(t.get('published_version'))}, checkpoint {_fmt(d['latest_checkpoint'])}, "
            f"updated {_age(now, t.get('updated'))}{end}"
        )
    else:
        lines.append(f"trainer: not started yet (no report in trainer_meta/); checkpoint {_fmt(d['latest_checkpoint'])}")
    store = d["store"]
    if store is not None:
        c = store["counts"]
        lines.append(
            f"groups: committed {c['committed']}, consumed {c['consumed']}, dropped stale {c['dropped_stale']}, "
            f"pending {c['pending']}" + (f", quarantined {c['quarantined']}" if c.get("quarantined") else "")
            + (f", duplicates dropped {c['dropped_duplicate']}" if c.get("dropped_duplicate") else "")
        )
    else:
        lines.append(f"groups: no experience store yet ({d['store_error']})" if d["store_error"] else "groups: -")
    latest = d["latest_weights"]
    store_explorers = (store or {}).get("explorers", {})
    rows = []
    for name in sorted(set(d["explorers"]) | set(store_explorers)):
        s = store_explorers.get(name, {})
        ranks = d["explorers"].get(name) or [{}]
        for p in ranks:
            version = p.get("version")
            # Staleness and speed are figures of a running process; a rank that ended has neither.
            live = p and not p.get("gone") and p.get("state") not in FINAL_STATES
            stale = latest - int(version) if live and latest is not None and isinstance(version, int) else None
            state = f"gone: {p['gone']} (was {p.get('state')})" if p.get("gone") else p.get("state")
            rows.append([name, p.get("rank"), state, version, stale, p.get("groups_committed"),
                         p.get("tokens_per_s") if live else None,
                         None if p.get("weight_stall_s") is None else 1000 * p["weight_stall_s"], p.get("weight_load_s"),
                         p.get("weight_read_mb"), _age(now, p.get("updated")) if p else "-",
                         s.get("groups_per_s") if p is ranks[0] else None])
    failures = sum(int(p.get("weight_checksum_failures") or 0) for ranks in d["explorers"].values() for p in ranks)
    if failures:
        lines.append(f"weights: {failures} published file(s) failed their checksums in explorers and were skipped "
                     "(each explorer's log names them; they rebuilt from a full snapshot)")
    filtered = sum(int(p.get("groups_filtered") or 0) for ranks in d["explorers"].values() for p in ranks)
    if filtered:
        lines.append(f"dynamic sampling: {filtered} group(s) whose responses all scored the same were not committed "
                     "(algorithm.filter_groups); fresh tasks replaced them")
    lines.append("")
    if rows:
        if latest is None:
            lines.append("explorers (no policy published yet: staleness unknown)")
        else:
            lines.append(f"explorers (staleness = latest published version {latest} - version in use)")
        lines += _table(["explorer", "rank", "state", "version", "staleness", "groups", "tokens/s", "sync stall ms",
                         "sync load s", "sync MB read", "updated", "groups/s (all ranks)"], rows)
    else:
        lines.append("explorers: none has reported yet")
    servers = d.get("servers") or {}
    if servers:
        lines += ["", "auxiliary model servers (shared)"]
        lines += _table(["model", "engine", "state", "address", "generation", "published"],
                        [[name, a["engine"], a["state"], a["url"], a["generation"], _age(now, a.get("published"))]
                         for name, engines in servers.items() for a in engines])
    if d["time_shares"]:
        lines += ["", f"time, over each role's last {TIME_WINDOW_S / 60:.0f} minutes of records"]
        for role, share in d["time_shares"].items():
            ranked = sorted(share.items(), key=lambda kv: -kv[1])
            lines.append(f"  {role}: " + ", ".join(f"{phase} {100 * f:.0f}%" for phase, f in ranked))
    return "\n".join(lines) + "\n"
