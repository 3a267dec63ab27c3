"""The workflow registry: `WORKFLOWS.get("math_workflow")`, or user code as `module:function`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rfthpc.registry import Registry
from rfthpc.workflows.base import Workflow, WorkflowContext, WorkflowResult

if TYPE_CHECKING:
    from rfthpc.data.tasksets import Task

WORKFLOWS: Registry[Workflow] = Registry("workflow", "buffer.explorer_input.default_workflow_type", {
    "simple_workflow": "rfthpc.workflows.simple:simple_workflow",
    "math_workflow": "rfthpc.workflows.math:math_workflow",
})


def run_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Run the task's own workflow (`default_workflow_type`, or its row's `workflow_key`)."""
    return WORKFLOWS.get(task.workflow)(task, ctx)
