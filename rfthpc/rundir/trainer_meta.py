"""`trainer_meta.json`: where the trainer is, for explorers (which stage, is it done) and `rfthpc status`.

Rank 0 replaces it atomically at the start of each stage, after each step and when it ends. It
is a report, not the resume point: a restarted trainer resumes from its newest checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import read_json, write_json_atomic


@dataclass(frozen=True)
class TrainerMeta:
    """What the trainer reports about itself."""

    step: int = 0
    """Global step reached (steps of every stage so far)."""
    stage: str = ""
    stage_index: int = 0
    stage_start_step: int = 0
    """Global step at which the current stage began."""
    published_version: int | None = None
    done: bool = False
    """Every stage finished: explorers end, and a restarted trainer has nothing to do."""
    state: str = "training"
    """training, then done, stopped (a stop signal: requeue continues it) or failed."""
    host: str = ""
    pid: int = 0
    updated: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainerMeta | None:
        """The report in `data` (keys it does not know are ignored); None if it is not one."""
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError:
            return None

    def with_state(self, state: str) -> TrainerMeta:
        """The same report in another state (done sets `done`)."""
        return dataclasses.replace(self, state=state, done=self.done or state == "done")


def read_trainer_meta(run: RunDir) -> TrainerMeta | None:
    """The trainer's report; None before it wrote one (a missing or torn file)."""
    try:
        data = read_json(run.trainer_meta)
    except ValueError:
        return None
    return TrainerMeta.from_dict(data) if isinstance(data, dict) else None


def trainer_done(run: RunDir) -> bool:
    """True once the trainer reported that it finished every stage."""
    meta = read_trainer_meta(run)
    return meta is not None and meta.done


def write_trainer_meta(run: RunDir, meta: TrainerMeta) -> TrainerMeta:
    """Publish `meta`, stamped with this process and the time; return what was written."""
    meta = dataclasses.replace(meta, host=socket.gethostname(), pid=os.getpid(), updated=time.time())
    write_json_atomic(run.trainer_meta, dataclasses.asdict(meta))
    return meta
