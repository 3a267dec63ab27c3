"""Single-turn workflows: one prompt, `repeat_times` sampled responses, one reward function."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rfthpc.engines.sampling import Completion
from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.scoring import RewardOutcome, score_group, takes
from rfthpc.tasks.tasksets import EncodedPrompt, Task
from rfthpc.workflows.base import Experience, WorkflowContext, WorkflowResult, needs

SKIPPED = "prompt longer than max_prompt_tokens"
"""`WorkflowResult.info["skipped"]` of a task whose prompt is too long (and not truncated)."""


def sample_group(
    task: Task, ctx: WorkflowContext, messages: Sequence[Mapping[str, Any]], chat_template: str | None = None
) -> tuple[EncodedPrompt, list[Completion]] | None:
    """The prompt of `messages` (with the task's reply prefix; `chat_template`, else the task's) and its
    `repeat_times` sampled responses; None if the prompt is too long and not truncated."""
    prompt = ctx.prompts.encode(messages, chat_template or task.chat_template, task.reply_prefix)
    if prompt is None:
        return None
    return prompt, ctx.engine.generate([prompt.token_ids], task.repeat_times, task.rollout_args)[0]


def group_result(
    prompt: EncodedPrompt, completions: Sequence[Completion], rewards: Sequence[float],
    components: Sequence[dict[str, float]], infos: Sequence[dict[str, Any]] | None = None,
    info: Mapping[str, Any] | None = None,
) -> WorkflowResult:
    """The scored group: one single-turn experience per completion, with its reward, its reward
    components and its own `infos[i]`; `info` goes on the group."""
    infos = infos if infos is not None else [{} for _ in completions]
    experiences = [
        Experience.from_completion(prompt.token_ids, c, r, reward_components=comp, info=dict(i))
        for c, r, comp, i in zip(completions, rewards, components, infos, strict=True)
    ]
    return WorkflowResult(experiences, {"prompt_truncated": prompt.truncated, **(info or {})})


def score_responses(
    task: Task, ctx: WorkflowContext, reward_fn: str, responses: Sequence[str],
    reward_args: Mapping[str, Any] | None = None,
) -> RewardOutcome:
    """The task's `responses` scored by the named reward function (`score_group`: one that raises
    gives rewards 0 and `error`). `reward_args` are passed where the function takes them; the
    taskset's `reward_fn_args` win over them."""
    fn = REWARDS.get(reward_fn)
    args = {**{k: v for k, v in (reward_args or {}).items() if takes(fn, k)}, **task.reward_fn_args}
    return score_group(fn, reward_fn, responses, task.truth, args,
                       {"prompt": task.prompt, "task": task, "auxiliary": ctx.auxiliary})


def run_single_turn(
    task: Task, ctx: WorkflowContext, reward_fn: str, default_system_prompt: str | None = None, *,
    messages: Sequence[Mapping[str, Any]] | None = None, chat_template: str | None = None,
    reward_args: Mapping[str, Any] | None = None,
) -> WorkflowResult:
    """Generate the group for one task and score it with the named reward function.

    The prompt is `messages`, else the task's chat (`PromptBuilder.messages`) with
    `default_system_prompt`; `chat_template` replaces the task's. `reward_args` are passed to the
    reward function where it takes them; the taskset's `reward_fn_args` win over them.

    A prompt that is too long (and not truncated) gives an empty, `skipped` result. A reward
    function that raises gives rewards 0 and `info["reward_error"]` on the group and on each
    experience, so the caller can log it, count it and keep going.
    """
    chat = messages if messages is not None else ctx.prompts.messages(task, default_system_prompt)
    sampled = sample_group(task, ctx, chat, chat_template)
    if sampled is None:
        return WorkflowResult([], {"skipped": SKIPPED})
    prompt, completions = sampled
    outcome = score_responses(task, ctx, reward_fn, [c.text for c in completions], reward_args)
    error = {} if outcome.error is None else {"reward_error": outcome.error}
    return group_result(prompt, completions, outcome.rewards, outcome.components,
                        [dict(error) for _ in completions], error)


@needs()
def simple_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """One turn: system prompt (if any) + the task's prompt; reward function chosen by name."""
    assert task.reward_fn is not None, "run_workflow checks the needs first"
    return run_single_turn(task, ctx, task.reward_fn)
