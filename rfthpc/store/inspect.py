"""`rfthpc store inspect RUN_DIR`: what the store holds and how fast it fills and drains.

Counts come from the chunk file names (committed, pending), the trainer's progress file
(consumed, dropped, skipped, quarantined, staleness of consumed groups) and the attributes of the
pending chunks (policy versions waiting). Nothing is modified; a chunk that vanishes meanwhile
(GC) is skipped.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import is_temporary
from rfthpc.store.chunks import ChunkCorrupt, read_chunk_attrs
from rfthpc.store.layout import explorer_dirs, list_chunks, open_store
from rfthpc.store.reader_files import ReaderState, read_reader_progress
from rfthpc.tasks.claims import TaskClaims


def _hist(counter: Counter[int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(counter.items())}


def inspect_store(run_dir: Path, rate_window_s: float = 300.0) -> dict[str, Any]:
    """Summarise a run's experience store (refuses a directory that is not a store).

    Returns counts of groups (committed = consumed + dropped_stale + dropped_duplicate + skipped_eval +
    quarantined + evicted + pending; with replay, `reused` counts the reads after a group's first), per-explorer chunk/group counts and commit rates over the last `rate_window_s`,
    histograms of policy versions (pending) and staleness (consumed, and pending as of the trainer's
    next take: its current version + 1), and the task-claim progress of each taskset.
    """
    store = open_store(run_dir)
    now = time.time()
    progress = read_reader_progress(store)
    state = progress.state if progress is not None else ReaderState()
    counters = state.counters
    current_version = progress.current_version if progress is not None else None

    per_explorer: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"ranks": set(), "streams": set(), "chunks": 0, "groups": 0, "recent_groups": 0,
                 "first_commit": None, "last_commit": None}
    )
    pending = 0
    quarantined_files = 0
    pending_versions: Counter[int] = Counter()
    pending_eval = 0
    unreadable = 0
    for ref in sorted(list_chunks(store), key=lambda r: (r.stream, r.seq)):
        if ref.quarantined:
            quarantined_files += 1
            continue
        e = per_explorer[ref.explorer]
        e["ranks"].add(ref.rank)
        e["streams"].add(ref.stream)
        e["chunks"] += 1
        e["groups"] += ref.n_groups
        t = ref.commit_ns / 1e9
        e["first_commit"] = t if e["first_commit"] is None else min(e["first_commit"], t)
        e["last_commit"] = t if e["last_commit"] is None else max(e["last_commit"], t)
        if now - t <= rate_window_s:
            e["recent_groups"] += ref.n_groups
        seq, done = state.at(ref.stream)
        if ref.seq < seq:
            continue
        skip = done if ref.seq == seq else 0
        pending += ref.n_groups - skip
        try:
            attrs = read_chunk_attrs(ref.path)
        except (OSError, ChunkCorrupt):
            unreadable += 1
            continue
        for version, is_eval in list(zip(attrs["policy_versions"], attrs["eval_flags"]))[skip:]:
            pending_versions[version] += 1
            pending_eval += is_eval

    explorers = {}
    for name, e in sorted(per_explorer.items()):
        span = min(rate_window_s, now - e["first_commit"]) if e["first_commit"] is not None else 0.0
        explorers[name] = {
            "ranks": len(e["ranks"]),
            "streams": len(e["streams"]),
            "chunks": e["chunks"],
            "groups": e["groups"],
            "groups_per_s": e["recent_groups"] / span if span > 0 else 0.0,
            "last_commit_age_s": now - e["last_commit"] if e["last_commit"] is not None else None,
        }
    in_progress = sum(
        1 for d in explorer_dirs(store) for name in _names(d) if is_temporary(name)
    )
    # Groups in the replay buffer never read are pending too (the cursors moved past them).
    unread = [e for e in state.replay.values() if not e.uses]
    pending += len(unread)
    pending_versions.update(e.version for e in unread)
    evicted = int(counters.get("evicted", 0))
    consumed = int(counters.get("consumed", 0))
    dropped = int(counters.get("dropped_stale", 0))
    duplicates = int(counters.get("dropped_duplicate", 0))
    skipped = int(counters.get("skipped_eval", 0))
    quarantined_groups = int(counters.get("quarantined_groups", 0))
    pending_staleness: Counter[int] = Counter()
    if current_version is not None:
        # Pending groups are taken at the trainer's next step, which holds the version after this one.
        for version, count in pending_versions.items():
            pending_staleness[int(current_version) + 1 - version] += count
    tasksets = {}
    tasks_dir = RunDir(run_dir).tasks
    for d in sorted(tasks_dir.iterdir()) if tasks_dir.is_dir() else []:
        status = TaskClaims.read_status(run_dir, d.name)
        if status is not None:
            tasksets[d.name] = {
                "epoch": status.epoch,
                "total_epochs": status.total_epochs,
                "issued": status.issued,
                "completed": status.completed,
                "failed": status.failed,
                "outstanding": status.outstanding,
                "returned": status.returned,
                "reclaimed": status.reclaimed,
                "refill": status.refill,
            }
    return {
        "store": str(store),
        "time": now,
        "counts": {
            "committed": consumed + dropped + duplicates + skipped + quarantined_groups + evicted + pending,
            "consumed": consumed,
            "dropped_stale": dropped,
            "dropped_duplicate": duplicates,
            "skipped_eval": skipped,
            "quarantined": quarantined_groups,
            "pending": pending,
            "pending_eval": pending_eval,
            "evicted": evicted,
            "reused": int(counters.get("reused", 0)),
            "replay_buffer": len(state.replay),
        },
        "files": {
            "chunks": sum(e["chunks"] for e in explorers.values()),
            "in_progress_tmp": in_progress,
            "quarantined": quarantined_files,
            "unreadable_pending": unreadable,
        },
        "trainer": {
            "current_version": current_version,
            "last_take_age_s": now - progress.time if progress is not None else None,
        },
        "explorers": explorers,
        "policy_version_hist_pending": _hist(pending_versions),
        "staleness_hist_pending": _hist(pending_staleness),
        "staleness_hist_consumed": _hist(Counter(state.staleness_hist)),
        "tasksets": tasksets,
    }


def _names(d: Path) -> list[str]:
    try:
        return os.listdir(d)
    except FileNotFoundError:
        return []


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _hist_lines(title: str, hist: dict[str, int]) -> list[str]:
    if not hist:
        return [f"{title}: (none)"]
    top = max(hist.values())
    lines = [f"{title}:"]
    for k, v in sorted(hist.items(), key=lambda kv: int(kv[0])):
        lines.append(f"  {k:>6}  {v:>8}  {'#' * max(1, round(30 * v / top))}")
    return lines


def format_inspect(d: dict[str, Any]) -> str:
    """A readable report of `inspect_store`'s result."""
    c, f, t = d["counts"], d["files"], d["trainer"]
    lines = [f"experience store {d['store']}", ""]
    lines += _table(
        ["groups", "committed", "consumed", "dropped_stale", "dropped_duplicate", "skipped_eval", "quarantined",
         "pending"],
        [["", c["committed"], c["consumed"], c["dropped_stale"], c["dropped_duplicate"], c["skipped_eval"],
          c["quarantined"], c["pending"]]],
    )
    if c["replay_buffer"] or c["reused"] or c["evicted"]:
        lines.append(f"replay: {c['replay_buffer']} groups in the buffer, {c['reused']} reads after the first, "
                     f"{c['evicted']} pushed out before their first read")
    lines.append(
        f"files: {f['chunks']} chunks, {f['in_progress_tmp']} being written, {f['quarantined']} quarantined"
        + (f", {f['unreadable_pending']} pending unreadable" if f["unreadable_pending"] else "")
    )
    lines.append(
        f"trainer: current version {_fmt(t['current_version'])}, last take {_fmt(t['last_take_age_s'])} s ago"
    )
    lines.append("")
    rows = [
        [name, e["ranks"], e["streams"], e["chunks"], e["groups"], e["groups_per_s"], e["last_commit_age_s"]]
        for name, e in d["explorers"].items()
    ]
    lines += _table(["explorer", "ranks", "processes", "chunks", "groups", "groups/s", "last commit s ago"], rows)
    lines.append("")
    lines += _hist_lines("policy versions of pending groups", d["policy_version_hist_pending"])
    lines += _hist_lines("staleness of pending groups at the trainer's next step (its version + 1 - policy version)",
                         d["staleness_hist_pending"])
    lines += _hist_lines("staleness of consumed groups", d["staleness_hist_consumed"])
    if d["tasksets"]:
        lines.append("")
        rows = [[name, f"{s['epoch']}/{s['total_epochs']}", s["issued"], s["completed"], s["failed"],
                 s["outstanding"], s["returned"], s["reclaimed"], s["refill"]] for name, s in d["tasksets"].items()]
        lines += _table(["taskset", "epoch", "issued", "completed", "no group", "claimed", "returned", "reclaimed",
                         "refill"], rows)
    return "\n".join(lines) + "\n"
