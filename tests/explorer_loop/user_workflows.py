"""Workflows given to the explorer as user code (`module:function`), misbehaving on purpose."""

from __future__ import annotations

import time
from collections import Counter

from rfthpc.engines.sampling import Completion
from rfthpc.errors import ConfigError
from rfthpc.workflows.base import Experience, WorkflowResult

ATTEMPTS: Counter[str] = Counter()


def _generate(task, ctx) -> WorkflowResult:
    prompt = ctx.prompts.encode(ctx.prompts.messages(task))
    completions = ctx.engine.generate([prompt.token_ids], task.repeat_times, task.rollout_args)[0]
    return WorkflowResult([Experience.from_completion(prompt.token_ids, c, 1.0) for c in completions])


def flaky(task, ctx) -> WorkflowResult:
    """Fails on the first attempt of every task, then works."""
    ATTEMPTS[task.task_id] += 1
    if ATTEMPTS[task.task_id] == 1:
        raise ConnectionError("sandbox not ready")
    return _generate(task, ctx)


def slow(task, ctx) -> WorkflowResult:
    """Spends a second before asking for its responses (past a 0.5 s max_timeout)."""
    time.sleep(1.0)
    return _generate(task, ctx)


def misconfigured(task, ctx) -> WorkflowResult:
    """A config mistake: the same for every task, so retrying is pointless."""
    raise ConfigError("workflow_args.tool: unknown tool 'calculator'")


def unstorable_info(task, ctx) -> WorkflowResult:
    """Puts a set (not JSON) in the info of the task whose answer is `bad`: the store refuses that group."""
    result = _generate(task, ctx)
    if task.truth == "bad":
        for e in result.experiences:
            e.info["tags"] = {"x"}
    return result


def forgiving(task, ctx) -> WorkflowResult:
    """Catches any error of its generate call and scores a canned response instead (as a reward function
    calling a judge model might)."""
    prompt = ctx.prompts.encode(ctx.prompts.messages(task))
    try:
        completions = ctx.engine.generate([prompt.token_ids], task.repeat_times, task.rollout_args)[0]
    except Exception:  # noqa: BLE001 - the point of this workflow
        completions = [Completion([1], [0.0], "?", "stop")] * task.repeat_times
    return WorkflowResult([Experience.from_completion(prompt.token_ids, c, 0.0) for c in completions])


def plain(task, ctx) -> WorkflowResult:
    """One turn, reward 1."""
    return _generate(task, ctx)


def judged(task, ctx) -> WorkflowResult:
    """One turn; records what the engine returned for `rollout_args.logprobs` and asks the auxiliary
    `judge` model (its prompt as rendered by its own chat template is kept in the info)."""
    prompt = ctx.prompts.task_prompt(task)
    completions = ctx.engine.generate([prompt.token_ids], task.repeat_times, task.rollout_args)[0]
    judge = ctx.auxiliary["judge"]
    question = [{"role": "user", "content": "Is it right?"}]
    verdict = judge.chat(question)[0]
    top = completions[0].top_logprobs
    info = {
        "top_logprobs": None if top is None else [len(alternatives) for alternatives in top],
        "judge_prompt": judge.tokenizer.decode(judge.prompts.encode(question).token_ids),
        "judge_tokens": len(verdict.token_ids),
    }
    return WorkflowResult([Experience.from_completion(prompt.token_ids, c, 1.0, info=dict(info)) for c in completions])
