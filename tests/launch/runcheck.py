"""Checks of a finished run for the end-to-end launch tests: which groups the trainer consumed, each once.

The trainer garbage-collects consumed chunks after each checkpoint, so `ChunkKeeper` hard-links
every committed chunk into a folder of its own while the run goes on (a link keeps the data when
the store unlinks its name). At the end the consumption cursor of the trainer's last checkpoint
(`experiences/_reader/checkpointed.json`) says which of those groups it took.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from rfthpc.fsutil import is_temporary, read_json
from rfthpc.store.chunks import read_chunk
from rfthpc.store.layout import parse_chunk_name
from rfthpc.store.schema import Group


class ChunkKeeper:
    """Hard-links every committed chunk of a run's store into `keep/<explorer>/` until stopped."""

    def __init__(self, run_dir: Path, keep: Path, interval_s: float = 0.2) -> None:
        self.store = Path(run_dir) / "experiences"
        self.keep = Path(keep)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sweep()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sweep()

    def sweep(self) -> None:
        """Link the chunks committed since the last sweep."""
        if not self.store.is_dir():
            return
        for d in self.store.iterdir():
            if not d.is_dir() or not d.name[:1].isalnum():
                continue
            for name in os.listdir(d):
                src, dst = d / name, self.keep / d.name / name
                if is_temporary(name) or not name.endswith(".h5") or dst.exists():
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(src, dst)
                except FileNotFoundError:
                    continue


@dataclass
class Consumption:
    """What the trainer took, by its last checkpoint's cursor."""

    covered: list[Group]
    """Training groups the cursor moved past (trained, or dropped as too stale), in stream order."""
    pending: list[Group]
    """Committed groups after the cursor (never taken)."""
    counters: dict[str, int]
    """The reader's counters (consumed, dropped_stale, ...)."""


def consumption(run_dir: Path, keep: Path) -> Consumption:
    """Split the kept chunks' groups by the cursor of the trainer's newest checkpoint."""
    state = read_json(Path(run_dir) / "experiences" / "_reader" / "checkpointed.json")
    assert isinstance(state, dict), "no checkpointed reader state: the trainer never saved a checkpoint"
    cursor: dict[str, list[int]] = state["cursor"]
    covered: list[Group] = []
    pending: list[Group] = []
    for explorer_dir in sorted(p for p in Path(keep).iterdir() if p.is_dir()):
        refs = [r for r in (parse_chunk_name(explorer_dir.name, p) for p in explorer_dir.iterdir()) if r is not None]
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
