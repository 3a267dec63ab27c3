"""`trainer_meta/`: where the trainer is, for explorers (which stage, is it done) and `rfthpc status`.

A journal (`rfthpc.sharedfs.journal`) whose newest entry is the trainer's report: rank 0 appends one
at the start of each stage, after each step and when it ends, each under a new name, so explorers on
other nodes see a stage change at once (a file replaced under its name would reach them a cache
period late) and can wait for it on the journal as a doorbell. It is a report, not the resume point:
a restarted trainer resumes from its newest checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.handoff import Doorbell
from rfthpc.sharedfs.journal import journal_at


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


REPORTS_KEPT = 16
"""Reports left behind the newest."""


def read_trainer_meta(run: RunDir) -> TrainerMeta | None:
    """The trainer's newest report; None before it wrote one."""
    _, data = journal_at(run.trainer_meta, keep=REPORTS_KEPT).latest()
    try:
        parsed = None if data is None else json.loads(data)
    except ValueError:
        return None
    return TrainerMeta.from_dict(parsed) if isinstance(parsed, dict) else None


def trainer_doorbell(run: RunDir) -> Doorbell:
    """What rings on every report of the trainer (a step, a stage change, its end)."""
    return Doorbell(run.trainer_meta, keep=REPORTS_KEPT)


def trainer_done(run: RunDir) -> bool:
    """True once the trainer reported that it finished every stage."""
    meta = read_trainer_meta(run)
    return meta is not None and meta.done


def write_trainer_meta(run: RunDir, meta: TrainerMeta) -> TrainerMeta:
    """Publish `meta`, stamped with this process and the time; return what was written."""
    meta = dataclasses.replace(meta, host=socket.gethostname(), pid=os.getpid(), updated=time.time())
    data = json.dumps(dataclasses.asdict(meta), indent=2, sort_keys=True) + "\n"
    journal_at(run.trainer_meta, keep=REPORTS_KEPT).append(data.encode())
    return meta
