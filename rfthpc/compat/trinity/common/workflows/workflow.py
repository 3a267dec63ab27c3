"""`trinity.common.workflows.workflow`: `Task` and the `Workflow` base class of a plugin workflow."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.common.models.model import ModelWrapper
from trinity.utils.log import get_logger


@dataclass
class RolloutArgs:
    """A task's sampling settings (its taskset's `rollout_args`)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 512
    logprobs: int = 0
    n: int = 1


@dataclass
class Task:
    """One task as a plugin workflow reads it."""

    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    rollout_args: RolloutArgs = field(default_factory=RolloutArgs)
    raw_task: dict[str, Any] = field(default_factory=dict)
    task_desc: str | None = None
    truth: str | None = None
    is_eval: bool = False
    index: int = 0
    repeat_times: int = 1
    format_args: Any = None


class Workflow:
    """What a plugin workflow subclasses: it is built with its task and model, then `run` (or, where it is
    asynchronous, `run_async`) returns the experiences of one episode with their rewards."""

    can_reset: bool = False
    can_repeat: bool = False
    is_async: bool = False

    def __init__(self, *, task: Task, model: ModelWrapper, auxiliary_models: list[Any] | None = None) -> None:
        self.task = task
        self.model = model
        self.auxiliary_models = auxiliary_models or []
        self.logger = get_logger(type(self).__name__)

    @property
    def rollout_args(self) -> dict[str, Any]:
        """The task's sampling settings as keyword arguments of a chat call."""
        r = self.task.rollout_args
        return {"temperature": r.temperature, "top_p": r.top_p, "max_tokens": r.max_tokens}

    def run(self) -> list[Any]:
        """One episode's experiences."""
        raise NotImplementedError(f"{type(self).__name__} defines neither run nor run_async")

    async def run_async(self) -> list[Any]:
        """One episode's experiences, awaitable: `run` in a thread unless a subclass defines it."""
        import asyncio

        return await asyncio.to_thread(self.run)
