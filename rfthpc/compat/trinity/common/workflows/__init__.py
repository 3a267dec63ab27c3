"""`trinity.common.workflows`: the `Workflow` and `Task` classes and the `WORKFLOWS` registry plugins register
with (rfthpc names a plugin by its module path, so registering changes nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trinity.common.workflows.workflow import Task, Workflow


class _Registry:
    """`WORKFLOWS.register_module(name)`: a decorator that returns the class as it is."""

    def register_module(self, name: str | None = None, **_: Any) -> Callable[[type], type]:
        return lambda cls: cls


WORKFLOWS = _Registry()

__all__ = ["WORKFLOWS", "Task", "Workflow"]
