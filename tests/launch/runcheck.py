"""Checks of a finished run for the end-to-end launch tests: which groups the trainer consumed, each once.

The runs keep their consumed chunks (`filesystem.keep_consumed_chunks`, set by `tiny_config`), so at
the end the whole store is there and the consumption cursor of the trainer's last checkpoint
(`experiences/_reader/checkpointed.json`) says which of its groups the trainer took.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rfthpc.fsutil import read_json
from rfthpc.store.chunks import read_chunk
from rfthpc.store.layout import list_chunks
from rfthpc.store.schema import Group


@dataclass
class Consumption:
    """What the trainer took, by its last checkpoint's cursor."""

    covered: list[Group]
    """Training groups the cursor moved past (trained, or dropped as too stale), in stream order."""
    pending: list[Group]
    """Committed groups after the cursor (never taken)."""
    counters: dict[str, int]
    """The reader's counters (consumed, dropped_stale, ...)."""


def consumption(run_dir: Path) -> Consumption:
    """Split the store's groups by the cursor of the trainer's newest checkpoint (quarantined chunks
    are left out: the reader read nothing from them)."""
    store = Path(run_dir) / "experiences"
    state = read_json(store / "_reader" / "checkpointed.json")
    assert isinstance(state, dict), "no checkpointed reader state: the trainer never saved a checkpoint"
    cursor: dict[str, list[int]] = state["cursor"]
    covered: list[Group] = []
    pending: list[Group] = []
    refs = [r for r in list_chunks(store) if not r.quarantined]
    for ref in sorted(refs, key=lambda r: (r.stream, r.seq)):
        seq, done = cursor.get(ref.stream, [0, 0])
        _, groups = read_chunk(ref.path)
        taken = len(groups) if ref.seq < seq else (done if ref.seq == seq else 0)
        covered += [g for g in groups[:taken] if not g.is_eval]
        pending += [g for g in groups[taken:] if not g.is_eval]
    return Consumption(covered, pending, {k: int(v) for k, v in state["counters"].items()})


def task_key(group: Group) -> tuple[str, str, str]:
    """A task's identity across tasksets and epochs."""
    return (str(group.info.get("taskset", "")), str(group.info.get("epoch", "")), group.task_id)


def check_exactly_once(c: Consumption, expected_consumed: int) -> None:
    """Every taken group is a distinct group, every task is trained once (a task explored twice, by an
    explorer killed between its commit and marking the task done, has its second group dropped by
    the reader), and the counts add up to the trainer's steps."""
    ids = Counter(g.group_id for g in c.covered)
    assert not [g for g, n in ids.items() if n > 1], f"groups taken twice: {[g for g, n in ids.items() if n > 1]}"
    tasks = Counter(task_key(g) for g in c.covered)
    extra = sum(n - 1 for n in tasks.values())
    duplicates = c.counters.get("dropped_duplicate", 0)
    # A task may also be covered twice when its first group was dropped as too stale (not trained).
    assert duplicates <= extra <= duplicates + c.counters["dropped_stale"], \
        f"tasks covered twice: {[t for t, n in tasks.items() if n > 1]}; counters {c.counters}"
    assert c.counters["consumed"] == expected_consumed, c.counters
    assert len(c.covered) == c.counters["consumed"] + c.counters["dropped_stale"] + duplicates, \
        (len(c.covered), c.counters)


def trainer_steps(run_dir: Path) -> list[int]:
    """The step of every record in monitor/trainer.jsonl, in order (a resumed trainer repeats steps)."""
    steps = []
    for line in (Path(run_dir) / "monitor" / "trainer.jsonl").read_text().splitlines():
        try:
            steps.append(int(json.loads(line)["step"]))
        except (ValueError, KeyError):
            continue
    return steps


def log_tails(run_dir: Path, lines: int = 30) -> str:
    """The last lines of every log of a run (for failure messages)."""
    out = []
    for path in sorted((Path(run_dir) / "log").glob("*.out")):
        text = path.read_text(errors="replace").splitlines()
        out.append(f"--- {path.name}\n" + "\n".join(text[-lines:]))
    return "\n".join(out)
