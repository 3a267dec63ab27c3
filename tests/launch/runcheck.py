"""Checks of a finished run for the end-to-end launch tests: which groups the trainer consumed, each once.

The runs keep their consumed chunks (`filesystem.keep_consumed_chunks`, set by `tiny_config`), so at
the end `rfthpc.store.audit` reads the whole store against the cursor of the trainer's last
checkpoint.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from rfthpc.store.audit import Consumption, consumption
from rfthpc.store.schema import TaskRef

__all__ = ["Consumption", "check_exactly_once", "consumption", "log_tails", "trainer_steps"]


def check_exactly_once(c: Consumption, expected_consumed: int) -> None:
    """Every taken group is a distinct group, every task is trained once (a task explored twice, by an
    explorer killed between its commit and marking the task done, has its second group dropped by
    the reader), and the counts add up to the trainer's steps."""
    ids = Counter(g.group_id for g in c.covered)
    assert not [g for g, n in ids.items() if n > 1], f"groups taken twice: {[g for g, n in ids.items() if n > 1]}"
    tasks = Counter(TaskRef.of(g) for g in c.covered)
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
    """The last lines of every log of a run, and its last traceback where that ends earlier (torchrun's summary
    follows a rank's traceback), for failure messages."""
    out = []
    for path in sorted((Path(run_dir) / "log").glob("*.out")):
        text = path.read_text(errors="replace").splitlines()
        starts = [i for i, line in enumerate(text) if "Traceback (most recent call last)" in line]
        if starts and starts[-1] < len(text) - lines:
            out.append(f"--- {path.name}, its last traceback\n" + "\n".join(text[starts[-1]:starts[-1] + 40]))
        out.append(f"--- {path.name}\n" + "\n".join(text[-lines:]))
    return "\n".join(out)
