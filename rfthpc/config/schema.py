"""The whole rfthpc config: Trinity-RFT's sections plus rfthpc's `slurm` and `filesystem`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from rfthpc.config.algorithm import AlgorithmConfig
from rfthpc.config.buffer import BufferConfig
from rfthpc.config.explorer import ExplorerConfig
from rfthpc.config.model import ClusterConfig, ModelConfig
from rfthpc.config.monitor import MonitorConfig
from rfthpc.config.slurm import FilesystemConfig, SlurmConfig
from rfthpc.config.synchronizer import SynchronizerConfig
from rfthpc.config.trainer import TrainerConfig

Mode = Literal["both", "explore", "train"]


def trains(mode: str) -> bool:
    """Whether the trainer has work in a run or stage of this mode."""
    return mode in ("both", "train")


def explores(mode: str) -> bool:
    """Whether explorers have work in a run or stage of this mode."""
    return mode in ("both", "explore")

# Sections a stage may override; a stage holds partial dicts checked against these sections.
STAGE_SECTIONS = ("algorithm", "buffer", "explorer", "trainer", "synchronizer", "model")


@dataclass
class StageConfig:
    """One stage of a multi-stage run (e.g. sft_warmup, then rft); empty sections keep the run's."""

    stage_name: str = ""
    """Name of the stage (also its folder in checkpoints' metadata)."""
    mode: Optional[Mode] = None
    """Mode of this stage; defaults to the run's `mode` (an sft stage runs the trainer only)."""
    algorithm: dict[str, Any] = field(default_factory=dict)
    """Overrides of the `algorithm` section for this stage."""
    buffer: dict[str, Any] = field(default_factory=dict)
    """Overrides of the `buffer` section for this stage."""
    explorer: dict[str, Any] = field(default_factory=dict)
    """Overrides of the `explorer` section for this stage."""
    trainer: dict[str, Any] = field(default_factory=dict)
    """Overrides of the `trainer` section for this stage."""
    synchronizer: dict[str, Any] = field(default_factory=dict)
    """Overrides of the `synchronizer` section for this stage."""
    model: dict[str, Any] = field(default_factory=dict)
    """Overrides of the `model` section for this stage."""


@dataclass
class Config:
    """An rfthpc run: Trinity-RFT's config shape, run on Slurm through a shared run directory."""

    project: str = "rfthpc"
    """Project name; the run directory is `<checkpoint_root_dir>/<project>/<name>`."""
    name: str = "run"
    """Experiment name."""
    mode: Mode = "both"
    """both: trainer and explorers; explore / train: one role of an asynchronous pair of configs."""
    checkpoint_root_dir: str = "./checkpoints"
    """Root of run directories; must be on a filesystem every node sees."""
    continue_from_checkpoint: bool = True
    """Resume from the newest checkpoint in the run directory if there is one."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """RL algorithm and optimizer."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Policy model and token budgets."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """GPUs of the run."""
    buffer: BufferConfig = field(default_factory=BufferConfig)
    """Tasksets, batch sizes, experience buffer."""
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig)
    """Rollout engines."""
    synchronizer: SynchronizerConfig = field(default_factory=SynchronizerConfig)
    """Weight synchronisation and staleness."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Trainer job."""
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    """Metrics sinks."""
    stages: list[StageConfig] = field(default_factory=list)
    """Stages run in order (e.g. sft_warmup then rft); empty: one stage with this config."""
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    """rfthpc: Slurm resources and layout."""
    filesystem: FilesystemConfig = field(default_factory=FilesystemConfig)
    """rfthpc: locks and sharing of the run directory."""
