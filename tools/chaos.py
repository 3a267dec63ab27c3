"""A chaos soak: a tiny run on the local Slurm cluster while faults are injected at seeded random times.

Usage:
    bash tools/local_slurm.sh up
    .venv/bin/python tools/chaos.py [--seed 0] [--steps 150] [--interval 6 12] [--max-minutes 10] [--dir DIR]
                                    [--trainer-node NODE]

Builds a tiny model and synthetic GSM8K-format data, submits a GRPO run (a trainer job and a
2-task explorer array, transformers engine, `filesystem.keep_consumed_chunks` so the whole store
can be audited, a short `filesystem.lease_s`; the trainer on one node and every explorer on the
others, so with `--dir` on a shared filesystem the roles are different clients of it, as on a
cluster), and until the trainer reports `done` injects, every `--interval` seconds (uniform), one fault drawn from:

- `scancel` of a running explorer array task (a clean stop), requeued a few seconds later as an
  operator would (`scontrol requeue`);
- `scontrol requeue` of the trainer (it checkpoints on the SIGTERM and resumes);
- SIGKILL of an explorer or of the trainer process (no clean stop: its task fails), then the
  operator's `scontrol requeue` of the failed task;
- SIGSTOP of an explorer past its lease (its claims go to the others), SIGCONT later;
- truncation of a committed chunk file the trainer has not read yet (the reader quarantines it; its
  groups were read first, so the audit knows which they were);
- `rfthpc add-explorers` of another one-task array (at most `--max-added`).

The trainer is hit again only after it made two steps since its last fault, so the run ends however
long a restart takes on a busy machine.

Then it audits the run directory (`rfthpc.store.audit`): every group the trainer took is taken once
and no task is trained twice; no group is lost (each task an explorer completed with a group has
one in a readable chunk, or in a chunk this soak truncated); every quarantined chunk is one it
truncated; the trainer reached `total_steps` and its job ended COMPLETED. The last line is
`FIGURES faults=… groups_lost=… groups_trained_twice=… run_completed=0|1 unexplained_quarantined=… wall_s=…`,
after a line `roles on nodes: trainer N; explorers N,N` (from accounting)
(target: at least 20 faults in at most 10 minutes, 0 lost, 0 twice, completed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rfthpc.launch.torchrun import expand_nodelist
from rfthpc.rundir.explorer_meta import read_progress
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import read_trainer_meta
from rfthpc.store.audit import consumption, stored_tasks
from rfthpc.store.chunks import read_chunk
from rfthpc.store.layout import list_chunks
from rfthpc.store.reader_files import ReaderState, read_reader_progress
from rfthpc.store.schema import TaskRef
from rfthpc.tasks.claims import TaskClaims

REPO = Path(__file__).resolve().parents[1]

LEASE_S = 12.0
TRAINER_STEPS_BETWEEN_FAULTS = 2
BATCH = 4
TERMINAL = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT"}


def sh(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A command's captured text output (never raises on its exit code)."""
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)


def rfthpc(*args: str) -> subprocess.CompletedProcess[str]:
    return sh(sys.executable, "-m", "rfthpc", *args, timeout=300)


def build_inputs(root: Path) -> None:
    """The tiny model and the synthetic data the run reads."""
    from rfthpc.demos.synth_gsm8k import generate_splits, write_splits
    from rfthpc.demos.tinymodel import build_tiny_model

    build_tiny_model(root / "model", "tiny", seed=0)
    write_splits(root / "gsm8k", generate_splits(1500, 20, seed=0), "jsonl")


def cluster_nodes() -> list[str]:
    """The cluster's node names."""
    return sorted(set(sh("sinfo", "-h", "-N", "-o", "%N").stdout.split()))


def write_config(root: Path, steps: int, trainer_node: str | None) -> Path:
    """A tiny GRPO run: a trainer job (on `trainer_node`), a 2-task explorer array (on other nodes),
    faults expected everywhere."""
    apart: dict[str, dict[str, Any]] = {"trainer": {}, "explorer": {}}
    if trainer_node:
        apart = {"trainer": {"additional_parameters": {"nodelist": trainer_node}},
                 "explorer": {"additional_parameters": {"exclude": trainer_node}}}
    data = {
        "project": "chaos", "name": "soak", "checkpoint_root_dir": str(root / "runs"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-4}},
        "model": {"model_path": str(root / "model"), "max_prompt_tokens": 96, "max_response_tokens": 12,
                  "dtype": "float32"},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"total_epochs": 1, "total_steps": steps, "batch_size": BATCH, "explorer_input": {
            "taskset": {"name": "arith", "path": str(root / "gsm8k"), "split": "train",
                        "format": {"prompt_key": "question", "response_key": "answer"}},
            "default_workflow_type": "math_workflow"}},
        "explorer": {"eval_on_startup": False, "runner_per_model": 4,
                     "rollout_model": {"engine_type": "transformers", "engine_num": 2}},
        # Explorers may wait out a trainer restart (sync_timeout) and stay two versions ahead.
        "synchronizer": {"sync_interval": 1, "sync_offset": 1, "max_staleness": 2, "sync_timeout": 900},
        "trainer": {"save_interval": 2, "use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 16},
        "monitor": {"monitor_type": ["console"]},
        "filesystem": {"keep_consumed_chunks": True, "lease_s": LEASE_S},
        "slurm": {
            "signal_delay_s": 30, "max_requeues": 1000,
            "trainer": {"time": "00:30:00", "cpus_per_task": 1, "mem": "3G", **apart["trainer"]},
            "explorer": {"time": "00:30:00", "cpus_per_task": 1, "mem": "1500M", **apart["explorer"]},
        },
    }
    path = root / "soak.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def job_records(run: Path) -> list[dict[str, Any]]:
    """The run's jobs.jsonl records."""
    out = []
    for line in (run / "jobs.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def states(job_ids: list[str]) -> dict[str, str]:
    """Task id (`12`, `13_0`) → Slurm state, from squeue for live jobs and sacct for the rest."""
    out: dict[str, str] = {}
    if not job_ids:
        return out
    acct = sh("sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o", "JobID,State").stdout
    for line in acct.splitlines():
        task, _, state = line.partition("|")
        if task and "[" not in task:
            out[task] = state.split()[0] if state else "UNKNOWN"
    queued = sh("squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T").stdout
    for line in queued.splitlines():
        task, _, state = line.partition("|")
        if task and "[" not in task:
            out[task] = state
    return out


def role_nodes(run: Path) -> dict[str, set[str]]:
    """Role → the nodes its jobs ran on, from accounting."""
    nodes: dict[str, set[str]] = {}
    for record in job_records(run):
        out = sh("sacct", "-n", "-X", "-P", "-j", record["job_id"], "-o", "NodeList").stdout
        for node_list in set(out.split()) - {"None"}:
            nodes.setdefault(record["role"], set()).update(expand_nodelist(node_list))
    return nodes


def alive(pid: int, role: str) -> bool:
    """True if `pid` is a live process of this role (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return "rfthpc" in cmdline and role in cmdline


def resume(pid: int) -> None:
    """SIGCONT a process the soak stopped (it may have been killed meanwhile)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


@dataclass
class Soak:
    """The run, the faults injected so far and what follows them."""

    run: Path
    rng: random.Random
    started: float = field(default_factory=time.monotonic)
    faults: list[tuple[float, str, str]] = field(default_factory=list)
    later: list[tuple[float, str, str]] = field(default_factory=list)
    """(monotonic time, action, target) to do later: requeue a task, SIGCONT a process."""
    truncated: dict[str, set] = field(default_factory=dict)
    """Chunk file name → the tasks its groups were made from (read before it was truncated)."""
    added: int = 0
    max_added: int = 3
    """Explorer arrays added at most (each is another process on the same cores)."""
    trainer_hit_at: int = -TRAINER_STEPS_BETWEEN_FAULTS
    """The trainer's step at its last fault: it is hit again only after it made progress, so the run
    ends however slow a restart is on a busy machine."""

    def log(self, kind: str, target: str) -> None:
        t = time.monotonic() - self.started
        self.faults.append((t, kind, target))
        print(f"[chaos {t:6.1f} s] {kind} {target}", flush=True)

    @property
    def trainer_id(self) -> str:
        return next(r["job_id"] for r in job_records(self.run) if r["role"] == "trainer")

    def explorer_tasks(self) -> list[str]:
        ids = [r["job_id"] for r in job_records(self.run) if r["role"] == "explorer"]
        return [t for t, s in states(ids).items() if "_" in t and s == "RUNNING"]

    def explorer_pids(self) -> list[int]:
        pids = []
        for f in (self.run / "explorer_meta").glob("*/*.json"):
            p = read_progress(f)
            if p is not None and not p.final and alive(p.pid, "explore"):
                pids.append(p.pid)
        return pids

    # ---- faults --------------------------------------------------------------------------------

    def scancel_explorer(self) -> bool:
        tasks = self.explorer_tasks()
        if not tasks:
            return False
        task = self.rng.choice(tasks)
        sh("scancel", task)
        self.later.append((time.monotonic() + self.rng.uniform(3, 8), "requeue", task))
        self.log("scancel_explorer", task)
        return True

    def trainer_may_be_hit(self) -> bool:
        """The trainer made progress since its last fault."""
        meta = read_trainer_meta(RunDir(self.run))
        if meta is None or meta.done or meta.step < self.trainer_hit_at + TRAINER_STEPS_BETWEEN_FAULTS:
            return False
        self.trainer_hit_at = meta.step
        return True

    def requeue_trainer(self) -> bool:
        tid = self.trainer_id
        if states([tid]).get(tid) != "RUNNING" or not self.trainer_may_be_hit():
            return False
        sh("scontrol", "requeue", tid)
        self.log("requeue_trainer", tid)
        return True

    def kill_explorer(self) -> bool:
        pids = self.explorer_pids()
        if not pids:
            return False
        pid = self.rng.choice(pids)
        tasks_before = set(self.explorer_tasks())
        os.kill(pid, signal.SIGKILL)
        for task in tasks_before:
            self.later.append((time.monotonic() + 5, "requeue_if_failed", task))
        self.log("kill_explorer", str(pid))
        return True

    def kill_trainer(self) -> bool:
        meta = read_trainer_meta(RunDir(self.run))
        if meta is None or not alive(meta.pid, "train") or not self.trainer_may_be_hit():
            return False
        os.kill(meta.pid, signal.SIGKILL)
        self.later.append((time.monotonic() + 5, "requeue_if_failed", self.trainer_id))
        self.log("kill_trainer", str(meta.pid))
        return True

    def stop_explorer(self) -> bool:
        pids = self.explorer_pids()
        if not pids:
            return False
        pid = self.rng.choice(pids)
        os.kill(pid, signal.SIGSTOP)
        self.later.append((time.monotonic() + LEASE_S + self.rng.uniform(3, 8), "cont", str(pid)))
        self.log("stop_explorer_past_lease", str(pid))
        return True

    def truncate_chunk(self) -> bool:
        store = self.run / "experiences"
        progress = read_reader_progress(store)
        state = progress.state if progress is not None else ReaderState()
        # A chunk at least two past the reader's position in its stream: not being read right now.
        unread = [r for r in list_chunks(store) if not r.quarantined and r.seq > state.at(r.stream).seq + 1]
        if not unread:
            return False
        ref = self.rng.choice(unread)
        try:
            _, groups = read_chunk(ref.path)
        except Exception:  # noqa: BLE001 — committed files only; a vanished one is no target
            return False
        self.truncated[ref.path.name] = {k for g in groups if (k := TaskRef.of(g)) is not None}
        size = ref.path.stat().st_size
        with open(ref.path, "r+b") as f:
            f.truncate(size // 2)
        self.log("truncate_chunk", ref.path.name)
        return True

    def add_explorers(self) -> bool:
        if self.added >= self.max_added:
            return False
        self.added += 1
        name = f"extra{self.added}"
        out = rfthpc("add-explorers", "--run-dir", str(self.run), "--name", name, "--array-size", "1")
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return False
        self.log("add_explorers", name)
        return True

    def inject(self) -> None:
        """One fault, drawn until one applies now."""
        kinds = [self.scancel_explorer, self.requeue_trainer, self.kill_explorer, self.kill_trainer,
                 self.stop_explorer, self.truncate_chunk, self.add_explorers]
        weights = [3, 2, 2, 1, 2, 2, 1]
        for _ in range(10):
            if self.rng.choices(kinds, weights)[0]():
                return

    def follow_up(self) -> None:
        """Do what earlier faults scheduled and is due."""
        now = time.monotonic()
        due, self.later = [x for x in self.later if x[0] <= now], [x for x in self.later if x[0] > now]
        for _, action, target in due:
            if action == "cont":
                resume(int(target))
            elif action == "requeue" or states([target.split("_")[0]]).get(target) in {"FAILED", "CANCELLED"}:
                sh("scontrol", "requeue", target)


def audit(run: Path, soak: Soak, steps: int) -> dict[str, int]:
    """The soak's figures from the run directory."""
    taken = consumption(run)
    stored = stored_tasks(run)
    explained = set().union(*soak.truncated.values()) if soak.truncated else set()
    completed_with_group = 0
    for taskset in sorted(p.name for p in (run / "tasks").iterdir() if p.is_dir()):
        status = TaskClaims.read_status(run, taskset)  # every shard of the claim set
        if status is not None:
            completed_with_group += status.completed - status.failed
    lost = max(0, completed_with_group - len(stored | explained))
    quarantined = [r.path.name for r in list_chunks(run / "experiences") if r.quarantined]
    unexplained = [q for q in quarantined if not any(q.startswith(t) or t in q for t in soak.truncated)]
    meta = read_trainer_meta(RunDir(run))
    final = states([soak.trainer_id]).get(soak.trainer_id)
    completed = int(meta is not None and meta.done and meta.step == steps and final == "COMPLETED"
                    and taken.counters["consumed"] == steps * BATCH)
    print(f"audit: consumed {taken.counters}, stored tasks {len(stored)}, completed with a group "
          f"{completed_with_group}, truncated {len(soak.truncated)} chunk(s) holding {len(explained)} task(s), "
          f"quarantined {quarantined}, trainer {meta}, trainer job {final}", flush=True)
    return {"groups_lost": lost, "groups_trained_twice": taken.trained_twice() + taken.groups_taken_twice(),
            "unexplained_quarantined": len(unexplained), "run_completed": completed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=150, help="trainer steps of the run")
    ap.add_argument("--interval", type=float, nargs=2, default=(6.0, 12.0), metavar=("MIN", "MAX"),
                    help="seconds between faults (uniform)")
    ap.add_argument("--max-minutes", type=float, default=10.0, help="give up (run_completed=0) after this long")
    ap.add_argument("--max-added", type=int, default=3, help="explorer arrays added at most")
    ap.add_argument("--dir", type=Path, default=None, help="keep the run here (default: a temporary directory)")
    ap.add_argument("--trainer-node", default=None,
                    help="the trainer's node; explorers run on the others (default: the first of two or more)")
    args = ap.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="rfthpc-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    build_inputs(root)
    nodes = cluster_nodes()
    trainer_node = args.trainer_node or (nodes[0] if len(nodes) > 1 else None)
    out = rfthpc("submit", "--config", str(write_config(root, args.steps, trainer_node)))
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return 1
    run = Path(out.stdout.split("run directory ", 1)[1].splitlines()[0].strip())
    soak = Soak(run, random.Random(args.seed), max_added=args.max_added)
    print(f"run directory {run}", flush=True)
    deadline = soak.started + 60 * args.max_minutes
    next_fault: float | None = None  # the faults begin once the run has made its first step
    try:
        while time.monotonic() < deadline:
            meta = read_trainer_meta(RunDir(run))
            if meta is not None and meta.done:
                break
            if next_fault is None and meta is not None and meta.step >= 1:
                next_fault = time.monotonic() + soak.rng.uniform(*args.interval)
            soak.follow_up()
            if next_fault is not None and time.monotonic() >= next_fault:
                soak.inject()
                next_fault = time.monotonic() + soak.rng.uniform(*args.interval)
            time.sleep(0.5)
        for _, action, target in soak.later:  # nothing stays stopped
            if action == "cont":
                resume(int(target))
        wall = time.monotonic() - soak.started
        tid = soak.trainer_id
        end = time.monotonic() + 120
        while time.monotonic() < end and states([tid]).get(tid) not in TERMINAL:
            time.sleep(1)
    finally:
        ids = [r["job_id"] for r in job_records(run)]
        sh("scancel", *ids)
    figures = audit(run, soak, args.steps)
    kinds: dict[str, int] = {}
    for _, kind, _ in soak.faults:
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"faults by kind: {kinds}", flush=True)
    placed = role_nodes(run)
    print(f"roles on nodes: trainer {','.join(sorted(placed.get('trainer', ())))}; "
          f"explorers {','.join(sorted(placed.get('explorer', ())))}", flush=True)
    print(f"FIGURES faults={len(soak.faults)} groups_lost={figures['groups_lost']} "
          f"groups_trained_twice={figures['groups_trained_twice']} run_completed={figures['run_completed']} "
          f"unexplained_quarantined={figures['unexplained_quarantined']} wall_s={wall:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
