"""`synchronizer` section: how often the trainer publishes weights and how stale experience may be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional


@dataclass
class SynchronizerConfig:
    """Weight synchronisation between trainer and explorers, through the run directory."""

    sync_method: Literal["checkpoint", "nccl", "memory"] = "checkpoint"
    """rfthpc publishes safetensors under `weights/`; nccl and memory are read as checkpoint (separate
    jobs share no NCCL group)."""
    sync_style: Literal["fixed"] = "fixed"
    """Publish every `sync_interval` trainer steps."""
    sync_interval: int = 1
    """Trainer steps between weight publications (1: every step)."""
    sync_offset: int = 0
    """Extra policy versions explorers may run ahead (0 with sync_interval 1: on-policy lock-step)."""
    sync_timeout: float = 3600.0
    """Seconds an explorer waits for a policy within the staleness bound before it stops with an error."""
    max_staleness: Optional[int] = None
    """Largest allowed (trainer version - experience version); defaults to `sync_interval - 1 + sync_offset`."""
    keep_published: int = 3
    """Published policies kept besides those a live explorer may still be loading (at least 2: an
    explorer may be loading the one before the newest)."""
    weight_deltas: Literal["auto", "on", "off"] = "auto"
    """Publish each version as a compressed XOR delta against the previous one (explorers read only
    deltas): auto does for 16-bit weights (bf16 on GPUs), where an RL step changes a few percent of
    the bit patterns; float32 deltas save little. off: every version is a full snapshot."""
    full_snapshot_interval: int = 10
    """With deltas, every this many versions is also written as a full Hugging Face snapshot (for
    explorers that start late or are requeued, for fallback and for `rfthpc weights materialize`)."""
