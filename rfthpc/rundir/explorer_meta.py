"""Progress of one explorer process: `explorer_meta/<name>/<rank>.json`, replaced atomically.

The record (`ExplorerProgress`) says what the process does and how far it got. It is rewritten
on every change and at least every quarter lease by the explorer's heartbeat, so a record older
than its `lease_s` belongs to a process that is gone (killed, stopped past its lease, its node
lost). A requeued process reads it back to continue its step count and not repeat an evaluation.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import read_json, write_json_atomic

FINAL_STATES = frozenset({"done", "stopped", "failed"})
"""States after which the process writes nothing more."""


@dataclass
class ExplorerProgress:
    """What one explorer process reports."""

    name: str
    rank: int
    state: str = "starting"
    """starting, started, exploring, waiting_for_stage, waiting_for_weights, asking_for_weights,
    waiting_for_trainer; then one of FINAL_STATES."""
    stage: int | None = None
    stage_name: str | None = None
    taskset: str | None = None
    """The taskset of the last batch."""
    version: int | None = None
    """Policy version the engine holds."""
    need_version: int | None = None
    """While waiting for weights: the version the claimed tasks need."""
    steps: int = 0
    groups_committed: int = 0
    tasks_completed: int = 0
    groups_filtered: int = 0
    """Groups dynamic sampling dropped (`algorithm.filter_groups`): their tasks were replaced by fresh ones."""
    tokens_per_s: float | None = None
    weight_stall_s: float | None = None
    """Seconds the last policy update stopped exploration (its in-place load from staging)."""
    weight_load_s: float | None = None
    """Seconds the last policy update took to read, rebuild and stage in the background."""
    weight_read_mb: float | None = None
    """Megabytes of the run directory read for the last policy update (deltas, or a full snapshot)."""
    weight_checksum_failures: int = 0
    """Published files that failed their checksums (each fell back to a full snapshot)."""
    evaluated_version: int | None = None
    error: str | None = None
    host: str = ""
    pid: int = 0
    updated: float = 0.0
    """Unix time of the last write (a change or a heartbeat)."""
    lease_s: float = 300.0
    """The run's filesystem.lease_s: a record older than this is of a process that is gone."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExplorerProgress | None:
        """The record in `data` (keys it does not know are ignored); None without a name and rank."""
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError:
            return None

    @property
    def final(self) -> bool:
        """True once the process reported its end (done, stopped or failed)."""
        return self.state in FINAL_STATES

    def age_s(self, now: float) -> float:
        """Seconds since the last write."""
        return now - self.updated

    def expired(self, now: float) -> bool:
        """True if a process that has not ended missed its heartbeats for a whole lease."""
        return not self.final and self.age_s(now) > self.lease_s


def progress_path(run: RunDir, name: str, rank: int) -> Path:
    """Where explorer `name`, array task `rank`, records its progress."""
    return run.explorer_meta(name, rank)


def read_progress(path: Path) -> ExplorerProgress | None:
    """The record at `path`; None if it is missing, torn or not a record."""
    try:
        data = read_json(path)
    except ValueError:
        return None
    return ExplorerProgress.from_dict(data) if isinstance(data, dict) else None


class Progress:
    """The progress record of one explorer process, written by its loop and its heartbeat thread."""

    def __init__(self, run: RunDir, name: str, rank: int, lease_s: float) -> None:
        self.path = progress_path(run, name, rank)
        previous = read_progress(self.path)
        self.record = ExplorerProgress(name=name, rank=rank, lease_s=lease_s)
        if previous is not None:
            # Counts continue across requeues; the evaluated version keeps an evaluation from repeating.
            self.record.steps = previous.steps
            self.record.groups_committed = previous.groups_committed
            self.record.tasks_completed = previous.tasks_completed
            self.record.groups_filtered = previous.groups_filtered
            self.record.evaluated_version = previous.evaluated_version
        self._lock = threading.Lock()

    def update(self, **values: Any) -> None:
        """Set `values` (fields of `ExplorerProgress`) and publish the record."""
        with self._lock:
            self.record = dataclasses.replace(self.record, **values)
            self._write()

    def add(self, **counts: int) -> None:
        """Add to counters (`groups_committed=3`) and publish the record."""
        with self._lock:
            self.record = dataclasses.replace(
                self.record, **{k: getattr(self.record, k) + n for k, n in counts.items()})
            self._write()

    def touch(self) -> None:
        """Publish the record unchanged but fresh (the heartbeat)."""
        with self._lock:
            self._write()

    def _write(self) -> None:
        self.record.host, self.record.pid, self.record.updated = socket.gethostname(), os.getpid(), time.time()
        write_json_atomic(self.path, dataclasses.asdict(self.record))
