"""`math_workflow`: GSM8K-style problems scored by final-answer equivalence."""

from __future__ import annotations

from rfthpc.data.tasksets import Task
from rfthpc.workflows.base import WorkflowContext, WorkflowResult, needs
from rfthpc.workflows.simple import run_single_turn

MATH_SYSTEM_PROMPT = "Solve the problem step by step. Write the final answer on the last line as '#### <number>'."


@needs(args=("system_prompt",), default_reward="math_reward", truth=True)
def math_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """One turn with a math system prompt; reward `math_reward` unless the taskset names another.

    workflow_args: `system_prompt` replaces MATH_SYSTEM_PROMPT (the taskset's
    format.system_prompt, if set, wins over both).
    """
    system_prompt = task.workflow_args.get("system_prompt", MATH_SYSTEM_PROMPT)
    assert task.reward_fn is not None, "run_workflow gives the default reward"
    return run_single_turn(task, ctx, task.reward_fn, system_prompt)
