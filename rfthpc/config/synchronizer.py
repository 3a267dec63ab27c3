"""`synchronizer` section: who decides when weights move, how often, and how stale experience may be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

SyncStyle = Literal["fixed", "explorer_driven", "trainer_driven"]


def default_max_staleness(style: str, sync_interval: int, sync_offset: int) -> int:
    """The staleness bound a style implies when `max_staleness` is not set.

    fixed and explorer_driven: an explorer that keeps pace gets the trainer's version every
    `sync_interval` of its batches and may be `sync_offset` batches ahead: `sync_interval - 1 +
    sync_offset`. trainer_driven: explorers look for a publication only every `sync_interval` of
    their batches and never wait for one there, and the trainer publishes every `sync_interval` of
    its steps, so a version can be up to `sync_interval - 1` steps old when it is published and stay
    in use `sync_interval` batches: `2 * sync_interval - 1 + sync_offset` (the explorer then never
    waits while it keeps pace with the trainer).
    """
    if style == "trainer_driven":
        return 2 * sync_interval - 1 + sync_offset
    return sync_interval - 1 + sync_offset


@dataclass
class SynchronizerConfig:
    """Weight synchronisation between trainer and explorers, through the run directory."""

    sync_method: Literal["checkpoint", "nccl", "memory"] = "checkpoint"
    """rfthpc publishes safetensors under `weights/`; nccl and memory are read as checkpoint (separate
    jobs share no NCCL group)."""
    sync_style: SyncStyle = "fixed"
    """Who decides when weights move (Trinity-RFT's three styles; its former names dynamic_by_explorer
    and dynamic_by_trainer are read as explorer_driven and trainer_driven). fixed: the trainer
    publishes every `sync_interval` steps; before each batch an explorer loads the newest
    publication, waiting only as the staleness bound requires. explorer_driven: after `sync_offset`
    batches and then every `sync_interval` batches, an explorer asks the trainer for weights and
    waits for the answer (at most `sync_timeout`); the trainer publishes only when asked (between
    steps, or at once while it waits for experience) if it trained since its last publication, else
    answers that it has nothing newer. trainer_driven: the trainer publishes every `sync_interval`
    steps and never waits; an explorer picks up the newest publication after `sync_offset` batches
    and then every `sync_interval` batches, without waiting if there is none. In every style the
    staleness bound (`max_staleness`) still holds. See docs/configuration.md."""
    sync_interval: int = 1
    """Trainer steps between publications (fixed, trainer_driven; 1: every step), and an explorer's
    batches between two syncs (explorer_driven, trainer_driven)."""
    sync_offset: int = 0
    """Batches an explorer runs before its first sync: extra policy versions explorers may run ahead
    (fixed: 0 with sync_interval 1 is on-policy lock-step)."""
    sync_timeout: float = 3600.0
    """Seconds an explorer waits for a policy within the staleness bound before it stops with an
    error (explorer_driven: also the longest wait for the trainer's answer, after which it goes on
    with the weights it holds and asks again at its next sync)."""
    max_staleness: Optional[int] = None
    """Largest allowed (trainer version - experience version); defaults to `sync_interval - 1 +
    sync_offset` (trainer_driven: `2 * sync_interval - 1 + sync_offset`)."""
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
