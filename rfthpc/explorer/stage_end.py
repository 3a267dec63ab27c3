"""How exploring a stage, or a wait inside it, ends: the one vocabulary of the explorer's loop."""

from __future__ import annotations

import enum


class StageEnd(enum.Enum):
    """How exploring a stage (or a wait inside it) ended."""

    FINISHED = "finished"
    """Every task of the stage is done (or the trainer needs no more)."""
    STOPPED = "stopped"
    """A stop signal: commit, release, exit for requeue."""
    TRAINER_DONE = "trainer_done"
    """The trainer finished every stage."""
    SKIPPED = "skipped"
    """The trainer is already past this stage."""


class Stopped(Exception):
    """A stop request arrived while waiting or evaluating; unwinds to the stage loop."""
