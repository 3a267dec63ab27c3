"""A trainer checkpoint's record, `global_step_<N>/<part>/rfthpc_checkpoint.json`, typed (no torch:
`rfthpc status` and tools read it too).

It is written last in each part of the checkpoint (the actor's decides that the checkpoint is
complete) and holds everything the trainer needs besides tensors to go on exactly where it was:
the stage, the store reader's consumption state, the SFT data position, the adaptive KL value.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import read_json, write_json_atomic
from rfthpc.store.reader_files import ReaderState

META_FILE = "rfthpc_checkpoint.json"
META_FORMAT = 1


@dataclass(frozen=True)
class CheckpointMeta:
    """What checkpoint `step` records besides tensors (rank 0's view)."""

    step: int
    """Global steps done."""
    stage: str
    """Name of the stage the checkpoint belongs to."""
    stage_index: int
    stage_start_step: int
    """Global step at which that stage began."""
    stage_finished: bool
    """True when the stage had ended: a resume starts the next one."""
    dtype: str
    """Compute dtype of the saved weights (`rfthpc convert` writes Hugging Face files in it)."""
    reader: ReaderState | None = None
    """The store reader's consumption state (RL stages; None in a run that never read the store)."""
    sft_data: Mapping[str, int] | None = None
    """The SFT data position (`SFTData.state_dict`; SFT stages)."""
    kl_controller: float | None = None
    """The adaptive KL controller's coefficient, when the algorithm has one."""
    nan_skipped_batches: int = 0
    published_version: int | None = None
    """The newest published policy version when the checkpoint was written."""
    world_size: int = 1
    time: float = field(default_factory=time.time)

    @property
    def step_in_stage(self) -> int:
        return self.step - self.stage_start_step

    def to_dict(self, role: str) -> dict[str, Any]:
        """The JSON form written into the checkpoint's part `role` (`actor` or `critic`)."""
        return {
            "format": META_FORMAT, "role": role, "step": self.step, "stage": self.stage,
            "stage_index": self.stage_index, "stage_start_step": self.stage_start_step,
            "stage_finished": self.stage_finished, "dtype": self.dtype,
            "scheduler": {"step_in_stage": self.step_in_stage},
            "reader": None if self.reader is None else self.reader.to_dict(),
            "sft_data": None if self.sft_data is None else dict(self.sft_data),
            "kl_controller": self.kl_controller, "counters": {"nan_skipped_batches": self.nan_skipped_batches},
            "published_version": self.published_version, "world_size": self.world_size, "time": self.time,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> CheckpointMeta:
        """Parse `to_dict`'s form; ValueError names `where` and what is wrong."""
        if not isinstance(data, dict) or data.get("format") != META_FORMAT:
            raise ValueError(f"{where} is not an rfthpc checkpoint of format {META_FORMAT}")
        try:
            kl, published, sft = data.get("kl_controller"), data.get("published_version"), data.get("sft_data")
            return cls(
                step=int(data["step"]), stage=str(data["stage"]), stage_index=int(data["stage_index"]),
                stage_start_step=int(data["stage_start_step"]), stage_finished=bool(data["stage_finished"]),
                dtype=str(data["dtype"]),
                reader=None if data.get("reader") is None else ReaderState.from_dict(data["reader"]),
                sft_data=None if sft is None else {str(k): int(v) for k, v in sft.items()},
                kl_controller=None if kl is None else float(kl),
                nan_skipped_batches=int((data.get("counters") or {}).get("nan_skipped_batches", 0)),
                published_version=None if published is None else int(published),
                world_size=int(data.get("world_size", 1)), time=float(data.get("time", 0.0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"{where}: malformed rfthpc checkpoint record ({e!r})") from e

    def written(self, world_size: int) -> CheckpointMeta:
        """This record as the trainer writes it now, by `world_size` ranks."""
        return replace(self, world_size=world_size, time=time.time())


def read_checkpoint_meta(run_dir: Path, step: int) -> CheckpointMeta:
    """The record of checkpoint `step` (its actor part's); ValueError when it is not one."""
    path = RunDir(run_dir).checkpoint(step) / "actor" / META_FILE
    return CheckpointMeta.from_dict(read_json(path), str(RunDir(run_dir).checkpoint(step)))


def write_checkpoint_meta(part_dir: Path, meta: CheckpointMeta) -> None:
    """Write `meta` into the checkpoint part `part_dir` (its name is the part's role)."""
    write_json_atomic(part_dir / META_FILE, meta.to_dict(part_dir.name))
