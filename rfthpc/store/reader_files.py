"""The trainer's reader records, typed, each with its read and write: the files under
`experiences/_reader/` and the consumption state the trainer's checkpoints carry.

    checkpointed.json   `ReaderState` of the newest complete trainer checkpoint (what may be collected)
    progress.json       `ReaderProgress`: the live state and counters (`rfthpc store inspect`)
    losses.json         groups lost per claim set the trainer consumes (explorers refill them)

Only the trainer's rank 0 writes these; everyone may read them. A missing or unreadable file reads as
None (nothing recorded yet), never as an error: readers run while the trainer writes or is dead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from rfthpc.algorithms.replay import Entry, Slot
from rfthpc.rundir.paths import READER_DIR
from rfthpc.sharedfs.fileops import make_dirs, read_json, write_json_atomic

PROGRESS_FILE = "progress.json"
CHECKPOINTED_FILE = "checkpointed.json"
STATE_FORMAT = 1
COUNTERS = ("consumed", "dropped_stale", "dropped_duplicate", "skipped_eval", "quarantined_chunks",
            "quarantined_groups", "evicted", "reused")
"""The reader's counters. Every committed group ends in one of them but `reused` and
`quarantined_chunks`, or is still pending (in the replay buffer unread, or not listed yet): `consumed`
counts first reads, `reused` the reads after them, `evicted` groups a full replay buffer pushed out
or turned away before their first read."""
T = TypeVar("T")


class Cursor(NamedTuple):
    """A stream's consumption position: every group of chunks before `seq` and the first `done`
    groups of chunk `seq` are consumed (taken, or dropped and counted)."""

    seq: int = 0
    done: int = 0

    def taken(self, seq: int, n_groups: int) -> int:
        """How many of the `n_groups` groups of the stream's chunk `seq` this cursor has moved past."""
        return n_groups if seq < self.seq else (self.done if seq == self.seq else 0)


@dataclass(frozen=True)
class ReaderState:
    """The reader's consumption state: enough for a restarted trainer to neither lose nor repeat a group."""

    cursor: Mapping[str, Cursor] = field(default_factory=dict)
    """Stream (writer process) -> its position."""
    counters: Mapping[str, int] = field(default_factory=dict)
    """`COUNTERS` since the run started."""
    lost: Mapping[str, int] = field(default_factory=dict)
    """Claim set -> groups lost (dropped as stale, or in a quarantined chunk)."""
    taken: Mapping[str, int] = field(default_factory=dict)
    """`<claims>:<epoch>` -> bitmap of the task indices taken for training (de-duplication)."""
    staleness_hist: Mapping[int, int] = field(default_factory=dict)
    """Staleness -> reads (first reads and reuses)."""
    version_hist: Mapping[int, int] = field(default_factory=dict)
    """Policy version -> reads."""
    replay: Mapping[Slot, Entry] = field(default_factory=dict)
    """The replay buffer (rfthpc.algorithms.replay): groups past the cursors that may still be read, by where they
    are stored. Empty without replay."""

    def at(self, stream: str) -> Cursor:
        """The position in `stream` (the start when nothing of it was consumed)."""
        return self.cursor.get(stream, Cursor())

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (checkpoint meta, `checkpointed.json`, `progress.json`)."""
        return {
            "format": STATE_FORMAT,
            "cursor": {s: list(c) for s, c in sorted(self.cursor.items())},
            "counters": {k: int(self.counters.get(k, 0)) for k in COUNTERS},
            "lost": dict(sorted(self.lost.items())),
            "taken": {k: format(v, "x") for k, v in sorted(self.taken.items())},
            "staleness_hist": {str(k): v for k, v in sorted(self.staleness_hist.items())},
            "version_hist": {str(k): v for k, v in sorted(self.version_hist.items())},
            **({"replay": _replay_to_dict(self.replay)} if self.replay else {}),
        }

    @classmethod
    def from_dict(cls, data: Any) -> ReaderState:
        """Parse `to_dict`'s form; ValueError names what is wrong."""
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise ValueError(f"not an experience-store reader state (format {STATE_FORMAT}): {str(data)[:200]}")
        try:
            return cls(
                cursor={str(s): Cursor(int(c[0]), int(c[1])) for s, c in data["cursor"].items()},
                counters={str(k): int(v) for k, v in data["counters"].items()},
                lost={str(k): int(v) for k, v in data.get("lost", {}).items()},
                taken={str(k): int(v, 16) for k, v in data.get("taken", {}).items()},
                staleness_hist={int(k): int(v) for k, v in data["staleness_hist"].items()},
                version_hist={int(k): int(v) for k, v in data["version_hist"].items()},
                replay=_replay_from_dict(data.get("replay", {})),
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise ValueError(f"malformed experience-store reader state ({e!r}): {str(data)[:200]}") from e


def _replay_to_dict(replay: Mapping[Slot, Entry]) -> dict[str, list[list[Any]]]:
    """Per stream, one row per entry: seq, pos, version, uses, priority, since, cooling (0/1), then the
    task's claim set, epoch and index (or nothing)."""
    out: dict[str, list[list[Any]]] = {}
    for slot, e in sorted(replay.items()):
        out.setdefault(slot.stream, []).append(
            [slot.seq, slot.pos, e.version, e.uses, e.priority, e.since, int(e.cooling), *(e.task or ())])
    return out


def _replay_from_dict(data: Mapping[str, Any]) -> dict[Slot, Entry]:
    replay = {}
    for stream, rows in data.items():
        for row in rows:
            seq, pos, version, uses, priority, since, cooling, *task = row
            if len(task) not in (0, 3):
                raise ValueError(f"replay entry {row!r} has {len(task)} task fields")
            replay[Slot(str(stream), int(seq), int(pos))] = Entry(
                int(version), int(uses), float(priority), float(since), bool(cooling),
                (str(task[0]), int(task[1]), int(task[2])) if task else None)
    return replay


@dataclass(frozen=True)
class ReaderProgress:
    """The reader's live report, written at most about once a second while it takes batches."""

    time: float
    """Unix time of the report."""
    current_version: int | None
    """The trainer's policy version at its last take (None before the first)."""
    state: ReaderState
    metrics: Mapping[str, float]
    """`StoreReader.metrics()` at the report."""

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "current_version": self.current_version, "state": self.state.to_dict(),
                "metrics": dict(self.metrics)}

    @classmethod
    def from_dict(cls, data: Any) -> ReaderProgress:
        if not isinstance(data, dict) or "state" not in data:
            raise ValueError(f"not a reader progress report: {str(data)[:200]}")
        version = data.get("current_version")
        return cls(float(data.get("time", 0.0)), None if version is None else int(version),
                   ReaderState.from_dict(data.get("state")),
                   {str(k): float(v) for k, v in (data.get("metrics") or {}).items()})


def _read(path: Path) -> Any:
    try:
        return read_json(path)
    except ValueError:
        return None


def _read_record(path: Path, parse: Callable[[Any], T]) -> T | None:
    """`parse` of the JSON file at `path`; None when it is missing or unreadable."""
    data = _read(path)
    try:
        return None if data is None else parse(data)
    except ValueError:
        return None


def read_checkpointed(store: Path) -> ReaderState | None:
    """The reader state of the trainer's newest complete checkpoint; None before the first one."""
    return _read_record(store / READER_DIR / CHECKPOINTED_FILE, ReaderState.from_dict)


def write_checkpointed(store: Path, state: ReaderState) -> None:
    """Record `state` as the newest complete checkpoint's (garbage collection trusts only this one)."""
    make_dirs(store / READER_DIR)
    write_json_atomic(store / READER_DIR / CHECKPOINTED_FILE, state.to_dict())


def read_reader_progress(store: Path) -> ReaderProgress | None:
    """The reader's last live report; None when no trainer has taken a batch yet."""
    return _read_record(store / READER_DIR / PROGRESS_FILE, ReaderProgress.from_dict)


def write_reader_progress(store: Path, progress: ReaderProgress) -> None:
    make_dirs(store / READER_DIR)
    write_json_atomic(store / READER_DIR / PROGRESS_FILE, progress.to_dict())
