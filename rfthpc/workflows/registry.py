"""The workflow registry: `WORKFLOWS.get("math_workflow")`, or user code as `module:function`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from rfthpc.errors import ConfigError
from rfthpc.registry import Registry
from rfthpc.workflows.base import Workflow, WorkflowContext, WorkflowResult, needs_of

if TYPE_CHECKING:
    from rfthpc.tasks.tasksets import Task

WORKFLOWS: Registry[Workflow] = Registry("workflow", "buffer.explorer_input.default_workflow_type", {
    "simple_workflow": "rfthpc.workflows.simple:simple_workflow",
    "math_workflow": "rfthpc.workflows.math:math_workflow",
    # Trinity-RFT's async_* variants run the same prompts and reward through its model's asynchronous
    # chat call (AsyncSimpleWorkflow; AsyncMathWorkflow takes MathWorkflow's reset); rfthpc batches
    # every workflow's engine requests itself, so each is its synchronous workflow.
    "async_simple_workflow": "rfthpc.workflows.simple:simple_workflow",
    "async_math_workflow": "rfthpc.workflows.math:math_workflow",
    "env_workflow": "rfthpc.workflows.env:env_workflow",
    "agent_workflow": "rfthpc.workflows.agent:agent_workflow",
    "agentscope_react_workflow": "rfthpc.workflows.agentscope_react:agentscope_react_workflow",
    "as_react_workflow": "rfthpc.workflows.agentscope_react:agentscope_react_workflow",
    "agentscope_react_math_workflow": "rfthpc.workflows.agentscope_react:agentscope_react_math_workflow",
    "math_boxed_workflow": "rfthpc.workflows.math:math_boxed_workflow",
    "math_dapo_workflow": "rfthpc.workflows.math:math_dapo_workflow",
    "math_rm_workflow": "rfthpc.workflows.judge:math_rm_workflow",
    "rubric_judge_workflow": "rfthpc.workflows.judge:rubric_judge_workflow",
    "math_ruler_workflow": "rfthpc.workflows.ruler:math_ruler_workflow",
    "math_trainable_ruler_workflow": "rfthpc.workflows.ruler:math_trainable_ruler_workflow",
    "toolcall_workflow": "rfthpc.workflows.toolcall:toolcall_workflow",
    "tool_call_workflow": "rfthpc.workflows.toolcall:toolcall_workflow",
    "frozen_lake_workflow": "rfthpc.workflows.frozen_lake:frozen_lake_workflow",
}, module_paths="rfthpc.workflows.trinity_plugin:plugin_workflow")


def reads_text_columns(workflow: str | None, workflow_key: str | None) -> bool:
    """Whether a taskset's rows need their prompt and reference-answer columns: yes unless its one
    workflow (no per-row `format.workflow_key`) declares that it reads neither (`text_columns`; an
    unknown workflow is reported elsewhere)."""
    if workflow_key or not workflow:
        return True
    try:
        declared = needs_of(WORKFLOWS.get(workflow))
    except ConfigError:
        return True
    return declared is None or declared.text_columns


def run_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Run the task's own workflow (`default_workflow_type`, or its row's `workflow_key`), after checking
    the task against what the workflow declared it needs; the task gets the workflow's default reward
    function if it names none."""
    fn = WORKFLOWS.get(task.workflow)
    declared = needs_of(fn)
    if declared is not None:
        problems = declared.problems(task.workflow, task.workflow_args, task.reward_fn, task.truth is not None,
                                     list(ctx.auxiliary))
        if problems:
            raise ConfigError(f"taskset {task.taskset!r}, task {task.task_id}: " + "; ".join(problems))
        task = dataclasses.replace(task, reward_fn=declared.reward(task.reward_fn))
    return fn(task, ctx)
