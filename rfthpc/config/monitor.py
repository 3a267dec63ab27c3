"""`monitor` section: where metrics go."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class MonitorConfig:
    """Metrics sinks. Every role always writes `monitor/<role>.jsonl` in the run directory."""

    monitor_type: list[Literal["console", "wandb", "tensorboard", "jsonl"]] = field(
        default_factory=lambda: ["console"])
    """Sinks besides jsonl: console, wandb, tensorboard (one string or a list). tensorboard writes event
    files to `monitor/tensorboard/<role>/` in the run directory (view them with `tensorboard --logdir
    <run dir>/monitor/tensorboard`) and needs the tensorboard package."""
    monitor_args: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for `wandb.init` (entity, tags, ...)."""
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    """offline by default: compute nodes have no internet; upload later with `wandb sync`."""


def tensorboard_missing() -> str:
    """The error for `monitor_type: tensorboard` in a Python without the tensorboard package."""
    return (f"monitor.monitor_type: tensorboard needs the tensorboard package, which this Python ({sys.executable}) "
            "does not have: `pip install tensorboard`, or remove tensorboard from monitor.monitor_type")


def sink_problems(config: MonitorConfig) -> list[str]:
    """Sinks this Python cannot write to (packages looked up, not imported: loading a config stays fast)."""
    if "tensorboard" in config.monitor_type and importlib.util.find_spec("tensorboard") is None:
        return [tensorboard_missing()]
    return []
