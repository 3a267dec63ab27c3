"""`math_workflow`: GSM8K-style problems scored by final-answer equivalence."""

from __future__ import annotations

from rfthpc.data.tasksets import Task
from rfthpc.errors import ConfigError
from rfthpc.workflows.base import WorkflowContext, WorkflowResult
from rfthpc.workflows.simple import check_workflow_args, run_single_turn

MATH_SYSTEM_PROMPT = "Solve the problem step by step. Write the final answer on the last line as '#### <number>'."


def math_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """One turn with a math system prompt; reward `math_reward` unless the taskset names another.

    workflow_args: `system_prompt` replaces MATH_SYSTEM_PROMPT (the taskset's
    format.system_prompt, if set, wins over both).
    """
    check_workflow_args(task, ("system_prompt",))
    if task.truth is None:
        raise ConfigError(
            f"taskset {task.taskset!r}: math_workflow needs reference answers; set format.response_key"
        )
    system_prompt = task.workflow_args.get("system_prompt", MATH_SYSTEM_PROMPT)
    return run_single_turn(task, ctx, task.reward_fn or "math_reward", system_prompt)
