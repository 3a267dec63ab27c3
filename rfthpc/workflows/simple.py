"""Single-turn workflows: one prompt, `repeat_times` sampled responses, one reward function."""

from __future__ import annotations

from rfthpc.data.tasksets import Task
from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.scoring import score_group
from rfthpc.workflows.base import Experience, WorkflowContext, WorkflowResult, needs


def run_single_turn(
    task: Task, ctx: WorkflowContext, reward_fn: str, default_system_prompt: str | None = None
) -> WorkflowResult:
    """Generate the group for one task and score it with the named reward function.

    A prompt that is too long (and not truncated) gives an empty, `skipped` result. A reward
    function that raises gives rewards 0 and `info["reward_error"]` on the group and on each
    experience, so the caller can log it, count it and keep going.
    """
    fn = REWARDS.get(reward_fn)
    prompt = ctx.prompts.task_prompt(task, default_system_prompt)
    if prompt is None:
        return WorkflowResult([], {"skipped": "prompt longer than max_prompt_tokens"})
    completions = ctx.engine.generate([prompt.token_ids], task.repeat_times, task.rollout_args)[0]
    outcome = score_group(
        fn, reward_fn, [c.text for c in completions], task.truth, task.reward_fn_args,
        {"prompt": task.prompt, "task": task, "auxiliary": ctx.auxiliary},
    )
    info = {"prompt_truncated": prompt.truncated}
    exp_info = {}
    if outcome.error is not None:
        info["reward_error"] = exp_info["reward_error"] = outcome.error
    experiences = [
        Experience.from_completion(prompt.token_ids, c, r, reward_components=comp, info=dict(exp_info))
        for c, r, comp in zip(completions, outcome.rewards, outcome.components)
    ]
    return WorkflowResult(experiences, info)


@needs()
def simple_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """One turn: system prompt (if any) + the task's prompt; reward function chosen by name."""
    assert task.reward_fn is not None, "run_workflow checks the needs first"
    return run_single_turn(task, ctx, task.reward_fn)
