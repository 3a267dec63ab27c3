"""What the trainer took from a store, by its last checkpoint: an audit of a finished run.

For runs that keep their consumed chunks (`filesystem.keep_consumed_chunks`): the whole store is
still there, and the consumption cursor of the trainer's newest checkpoint
(`experiences/_reader/checkpointed.json`) says which groups the trainer moved past (trained, or
dropped as too stale or as a second group of one task) and which it never took. The end-to-end
tests and `tools/chaos.py` check a run with it; `rfthpc store export` writes the whole history as
JSON lines for offline analysis.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from rfthpc.errors import UserError
from rfthpc.store.chunks import ChunkCorrupt, read_chunk
from rfthpc.store.layout import ChunkRef, list_chunks
from rfthpc.store.reader_files import ReaderState, read_checkpointed
from rfthpc.store.schema import Group, TaskRef


@dataclass
class Consumption:
    """What the trainer took, by its last checkpoint's cursor."""

    covered: list[Group]
    """Training groups the cursor moved past (trained, or dropped), in stream order."""
    pending: list[Group]
    """Committed groups after the cursor, and those in the replay buffer never read (never taken)."""
    counters: dict[str, int]
    """The reader's counters (consumed, dropped_stale, dropped_duplicate, ...)."""

    def trained_twice(self) -> int:
        """Second groups of a task the reader did not drop: the covered repeats of a task beyond what
        its drops explain (a task explored twice has its second group dropped as a duplicate; one
        whose first group was dropped as too stale may be covered again). 0 in a correct run."""
        tasks = Counter(TaskRef.of(g) for g in self.covered)
        extra = sum(n - 1 for key, n in tasks.items() if key is not None)
        dropped = sum(self.counters.get(k, 0) for k in ("dropped_duplicate", "dropped_stale", "evicted"))
        return max(0, extra - dropped)

    def groups_taken_twice(self) -> int:
        """Groups (by id) the cursor moved past more than once. 0 in a correct run."""
        return sum(n - 1 for n in Counter(g.group_id for g in self.covered).values())


def _readable_chunks(store: Path) -> Iterator[tuple[ChunkRef, list[Group]]]:
    """Each readable chunk of the store with its groups, in stream order (each file read once)."""
    for ref in sorted((r for r in list_chunks(store) if not r.quarantined), key=lambda r: (r.stream, r.seq)):
        try:
            _, groups = read_chunk(ref.path)
        except (ChunkCorrupt, FileNotFoundError):
            continue  # damaged or gone after the reader passed it; the reader took it whole before
        yield ref, groups


def consumption(run_dir: Path) -> Consumption:
    """Split the store's readable groups by the cursor of the trainer's newest checkpoint."""
    store = Path(run_dir) / "experiences"
    state = read_checkpointed(store)
    if state is None:
        raise UserError(f"{store}: no checkpointed reader state; the trainer never saved a checkpoint")
    covered: list[Group] = []
    pending: list[Group] = []
    unread = _unread(state)
    for ref, groups in _readable_chunks(store):
        taken = state.at(ref.stream).taken(ref.seq, len(groups))
        for position, g in enumerate(groups):
            if not g.is_eval:
                (covered if position < taken and (ref.stream, ref.seq, position) not in unread else pending).append(g)
    return Consumption(covered, pending, dict(state.counters))


def _unread(state: ReaderState) -> set[tuple[str, int, int]]:
    """Where the groups are that the replay buffer holds but the trainer never read."""
    return {tuple(slot) for slot, e in state.replay.items() if not e.uses}


def stored_tasks(run_dir: Path) -> set[TaskRef]:
    """The tasks that have a group in a readable chunk of the store."""
    return {key for _, groups in _readable_chunks(Path(run_dir) / "experiences") for g in groups
            if (key := TaskRef.of(g)) is not None}


def _plain(value: Any) -> Any:
    """`value` as JSON data (numpy arrays and scalars become lists and numbers)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def export_groups(run_dir: Path, out: IO[str]) -> dict[str, int]:
    """Write every readable group of the store to `out`, one JSON object per line, oldest stream
    position first, with `status`: `taken` (the trainer's newest checkpoint moved past it: trained,
    or dropped as stale or a duplicate), `pending` (committed, not taken; with replay also waiting in
    the replay buffer, never read), or `unknown` (no checkpoint yet); `eval` groups are evaluations.
    Returns the count per status."""
    store = Path(run_dir) / "experiences"
    state = read_checkpointed(store)
    unread = set() if state is None else _unread(state)
    counts: Counter[str] = Counter()
    for ref, groups in _readable_chunks(store):
        taken = None if state is None else state.at(ref.stream).taken(ref.seq, len(groups))
        for position, g in enumerate(groups):
            status = "eval" if g.is_eval else "unknown" if taken is None else \
                "taken" if position < taken and (ref.stream, ref.seq, position) not in unread else "pending"
            counts[status] += 1
            record = {
                "group_id": g.group_id, "task_id": g.task_id, "status": status, "policy_version": g.policy_version,
                "explorer": g.explorer, "rank": g.rank, "created_at": g.created_at, "finished_at": g.finished_at,
                "chunk": ref.path.name, "info": _plain(g.info),
                "experiences": [{"prompt_ids": _plain(e.prompt_ids), "response_ids": _plain(e.response_ids),
                                 "logprobs": _plain(e.logprobs), "loss_mask": _plain(e.loss_mask),
                                 "reward": float(e.reward), "token_rewards": _plain(e.token_rewards),
                                 "teacher_logprobs": _plain(e.teacher_logprobs), "info": _plain(e.info)}
                                for e in g.experiences],
            }
            out.write(json.dumps(record) + "\n")
    return dict(counts)
