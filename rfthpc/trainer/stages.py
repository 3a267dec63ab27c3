"""Where the trainer is in a multi-stage run (e.g. sft_warmup, then rft), and where to resume.

Steps are counted globally: a 60-step SFT stage is steps 1..60 and the RFT stage after it starts
at step 61 (its `stage_start_step` is 60). A stage ends after its `buffer.total_steps` steps, or
when its data runs out (SFT: `total_epochs` passes over the dataset; RL: the explorers' tasks
are done and no full batch is left). Stages whose mode is `explore` have no trainer work and are
passed over. A checkpoint records the stage it belongs to and whether that stage had finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rfthpc.config.settings import TrainerStageSettings
from rfthpc.errors import UserError
from rfthpc.trainer.checkpoint_meta import CheckpointMeta


@dataclass
class Position:
    """The stage to run and how far the trainer got."""

    stage_index: int
    """Index into the run's stages."""
    stage_start_step: int
    """Global step at which the stage began (its first step is stage_start_step + 1)."""
    step: int
    """Global steps done so far."""

    @property
    def step_in_stage(self) -> int:
        """Steps of this stage done so far."""
        return self.step - self.stage_start_step


def next_trainable(stages: Sequence[TrainerStageSettings], index: int) -> int | None:
    """The first stage at or after `index` that the trainer runs, or None if there is none."""
    for i in range(index, len(stages)):
        if stages[i].trains:
            return i
    return None


def resume_position(stages: Sequence[TrainerStageSettings], meta: CheckpointMeta | None) -> Position | None:
    """Where to start: the first trainable stage at step 0 without a checkpoint, else after the
    checkpoint `meta` (the next stage if the checkpoint's stage had finished). None: all done."""
    if meta is None:
        first = next_trainable(stages, 0)
        return None if first is None else Position(first, 0, 0)
    if meta.stage_index >= len(stages) or stages[meta.stage_index].name != meta.stage:
        names = ", ".join(s.name for s in stages)
        raise UserError(
            f"the newest checkpoint (step {meta.step}) belongs to stage {meta.stage!r} (number {meta.stage_index}), "
            f"but the run's config has the stages: {names}. The stages of a run cannot change once it has started; "
            "restore the original `stages:` or start a new run (another `name`)"
        )
    if meta.stage_finished:
        nxt = next_trainable(stages, meta.stage_index + 1)
        return None if nxt is None else Position(nxt, meta.step, meta.step)
    return Position(meta.stage_index, meta.stage_start_step, meta.step)
