"""`monitor` section: where metrics go."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class MonitorConfig:
    """Metrics sinks. Every role always writes `monitor/<role>.jsonl` in the run directory."""

    monitor_type: list[Literal["console", "wandb", "jsonl"]] = field(default_factory=lambda: ["console"])
    """Sinks besides jsonl: console, wandb (one string or a list)."""
    monitor_args: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for `wandb.init` (entity, tags, ...)."""
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    """offline by default: compute nodes have no internet; upload later with `wandb sync`."""
