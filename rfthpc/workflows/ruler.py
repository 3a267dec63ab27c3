"""RULER (after OpenPipe ART's relative rewards): a judge reads a task's whole group of responses at
once and scores each from 0 to 1, relative to the others. Trinity-RFT's two math workflows of it:

- `math_ruler_workflow`: an auxiliary model (`explorer.auxiliary_models`) judges; its scores are
  the rewards.
- `math_trainable_ruler_workflow`: the policy judges its own group, and where the reference answer
  is taken as available, it is rewarded on the reference answer and its judgements are trained too,
  rewarded by how close they come to the reference answer's scores.

Both score the responses with the taskset's reward function as well (default `math_reward`), as
Trinity's "gold reward": a record (`info.gold_reward`) in the first, the reward where the reference
answer is available in the second. The judge's reply is read as Trinity reads it: the last `[...]`
in it, a Python list of exactly one number per response, each clipped to [0, 1]; any other reply
scores every response 0 (`judge_success: false`).
"""

from __future__ import annotations

import ast
import random
from collections.abc import Mapping, Sequence
from typing import Any

from rfthpc.engines.sampling import Completion
from rfthpc.rewards.math_reward import accuracy_reward
from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.scoring import RewardOutcome
from rfthpc.store.schema import SUBGROUP
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import Experience, WorkflowContext, WorkflowResult, auxiliary_of, needs
from rfthpc.workflows.judge import RUBRIC_SYSTEM_PROMPT, Chat, judge_replies
from rfthpc.workflows.simple import SKIPPED, group_result, sample_group, score_responses

TAGS = ("The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
        "respectively, i.e.,\n<think> reasoning process here </think>\n<answer> answer here </answer>.")
"""The answer format both of Trinity's prompts describe, its wording kept."""

THINK_ANSWER_SYSTEM_PROMPT = f"{RUBRIC_SYSTEM_PROMPT} {TAGS}\n"
"""The policy's system prompt with `math_reward` (Trinity-RFT's MathWorkflow prompt, which its RULER
workflows give with its `math_reward`)."""

RULER_SYSTEM_PROMPT = (
    "You are a fair judge. The user will provide a question and {n} candidate solutions to it. Your task is to "
    "compare the solutions, see how well they resolve the question, and assign a score within the range [0, 1] "
    "for each solution."
)
"""Trinity-RFT's RULER judge system prompt; `n`: the number of responses."""

RULER_PROMPT = """
Below is a question and several candidate solutions.

Question: {question}

Solution format requirement: first thinks about the reasoning process in the mind and then provides the final answer. {tags}

{solutions}

Please assign a score within the range [0, 1] for each of them, reflecting how well they solve the question.
You may compare them against each other and think step by step before returning your final scores, but keep your reasoning process brief and concise when possible.

Conclude your response with a list of scores, in the following format: [score for solution 1, score for solution 2, ..., score for solution {n}]
"""
"""Trinity-RFT's RULER judge prompt, its wording and line breaks kept (math_ruler_workflow's; its
trainable variant's has no blank lines). `solutions`: `Candidate solution <i>: <response>` per
response, i from 1, a blank line between them."""

GROUND_TRUTH_PROBABILITY = 0.2
"""Trinity-RFT's chance that a task's reference answer is taken as available (math_trainable_ruler_workflow)."""

JUDGE = "judge"
"""The `SUBGROUP` of the judge replies math_trainable_ruler_workflow trains on."""


def ruler_chat(question: str, responses: Sequence[str]) -> Chat:
    """The judge's chat: RULER_SYSTEM_PROMPT and RULER_PROMPT on `question` and its `responses`."""
    n = len(responses)
    solutions = "\n\n".join(f"Candidate solution {i}: {text}" for i, text in enumerate(responses, 1))
    return [{"role": "system", "content": RULER_SYSTEM_PROMPT.format(n=n)},
            {"role": "user", "content": RULER_PROMPT.format(question=question, tags=TAGS, solutions=solutions, n=n)}]


def parse_ruler_scores(reply: str, n: int) -> list[float] | None:
    """The judge's scores of `n` responses: the reply's last `[` to its last `]` read as a Python
    literal, a list of `n` numbers, each clipped to [0, 1]; None for any other reply (Trinity's reading)."""
    start, end = reply.rfind("["), reply.rfind("]")
    if start == -1 or end < start:
        return None
    try:
        scores = ast.literal_eval(reply[start:end + 1])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if len(scores) != n or not all(isinstance(s, (int, float)) for s in scores):
        return None
    # Clipped before the conversion: an integer too large for a float still means 1.
    return [float(min(1, max(0, s))) for s in scores]


def policy_system_prompt(task: Task) -> str | None:
    """The default system prompt of the policy: THINK_ANSWER_SYSTEM_PROMPT with `math_reward`, none
    with another reward function (Trinity's condition); the taskset's own wins over it."""
    assert task.reward_fn is not None, "run_workflow gives the default reward"
    return THINK_ANSWER_SYSTEM_PROMPT if REWARDS.get(task.reward_fn) is accuracy_reward else None


def gold_scores(task: Task, ctx: WorkflowContext, responses: Sequence[str]) -> RewardOutcome | None:
    """The responses scored by the taskset's reward function on the reference answer; None without
    a reference answer."""
    assert task.reward_fn is not None, "run_workflow gives the default reward"
    return None if task.truth is None else score_responses(task, ctx, task.reward_fn, responses)


def gold_infos(gold: RewardOutcome | None, n: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each response's `gold_reward` and the group's `gold_error` (its reward function failed), as far
    as there are any."""
    if gold is None:
        return [{} for _ in range(n)], {}
    if gold.error is not None:
        return [{} for _ in range(n)], {"gold_error": gold.error}
    return [{"gold_reward": r} for r in gold.rewards], {}


@needs(args=("judge_model",), default_reward="math_reward", auxiliary="judge_model")
def math_ruler_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Trinity-RFT's `math_ruler_workflow`: one turn (THINK_ANSWER_SYSTEM_PROMPT with `math_reward`;
    the taskset's `format.system_prompt` wins), then an LLM judge reads the question and the whole
    group (`ruler_chat`) and scores every response; reward the judge's score as the component
    `ruler`, 0 for every response if its reply holds no list of one score per response
    (`judge_success: false`). The reward function (default `math_reward`) scores the responses on
    the reference answer, if the taskset has one, as a record only: `info.gold_reward`.

    workflow_args: `judge_model`, the auxiliary model that judges (default: the only one). Where it
    differs: Trinity asks its first auxiliary model through its OpenAI server with the server's
    sampling and no token limit; here the judge is named, decodes greedily within its
    `max_response_tokens`, and a judge prompt over its `max_prompt_tokens` scores 0. Trinity's
    prompt asks for a list ending with "score for solution {n + 1}", one more than there are; here
    it says n, as Trinity's trainable variant does.
    """
    judge = auxiliary_of(task, ctx, "judge_model")
    sampled = sample_group(task, ctx, ctx.prompts.messages(task, policy_system_prompt(task)))
    if sampled is None:
        return WorkflowResult([], {"skipped": SKIPPED})
    prompt, completions = sampled
    texts = [c.text for c in completions]
    (reply,) = judge_replies(judge, [ruler_chat(task.prompt, texts)])
    scores = parse_ruler_scores(reply, len(texts)) if reply is not None else None
    rewards = scores if scores is not None else [0.0] * len(texts)
    infos, info = gold_infos(gold_scores(task, ctx, texts), len(texts))
    for i in infos:
        i["judge_success"] = scores is not None
    return group_result(prompt, completions, rewards, [{"ruler": r} for r in rewards], infos,
                        {**info, "judge_success_rate": float(scores is not None), "judge_reply": reply})


def ground_truth_problems(args: Mapping[str, Any]) -> list[str]:
    """The problems with `math_trainable_ruler_workflow`'s `workflow_args`."""
    p = args.get("ground_truth_probability", GROUND_TRUTH_PROBABILITY)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        return [(f"workflow_args.ground_truth_probability: {p!r}; use a number from 0 to 1 (the chance that a "
                 "task's reference answer is used)")]
    return []


def self_judgements(task: Task, ctx: WorkflowContext, responses: Sequence[str], n: int
                    ) -> tuple[list[int], list[Completion], list[list[float] | None]]:
    """The policy's `n` judgements of its own `responses` (`ruler_chat` in the task's chat template, sampled
    with the task's rollout_args): the judge prompt's tokens, the replies and their scores (None:
    unparsed). A judge prompt over `max_prompt_tokens` (not truncated) gives no replies."""
    prompt = ctx.prompts.encode(ruler_chat(task.prompt, responses), task.chat_template)
    if prompt is None:
        return [], [], []
    replies = ctx.engine.generate([prompt.token_ids], n, task.rollout_args)[0]
    return prompt.token_ids, replies, [parse_ruler_scores(r.text, len(responses)) for r in replies]


def judge_reward(scores: list[float] | None, gold: Sequence[float]) -> float:
    """A judgement's reward: 1 - the mean absolute distance of its scores from the gold rewards
    scaled from [-0.1, 1.1] (Trinity's math_reward: accuracy and a 0.1 format term) to [0, 1];
    0 for an unparsed one."""
    if scores is None:
        return 0.0
    return 1.0 - sum(abs(s - (g + 0.1) / 1.2) for s, g in zip(scores, gold, strict=True)) / len(gold)


@needs(args=("ground_truth_probability",), default_reward="math_reward", truth=True, check=ground_truth_problems)
def math_trainable_ruler_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Trinity-RFT's `math_trainable_ruler_workflow`: the policy answers (as in `math_ruler_workflow`)
    and then judges its own group with RULER's prompts. With probability `ground_truth_probability`
    (Trinity's 0.2) the reference answer counts as available:

    - available: each response's reward is its gold reward (the reward function's, default
      `math_reward`, with its components); the policy judges `repeat_times` times, and each
      judgement is an experience too (its own prompt, in the group's subgroup `judge`, compared with
      the other judgements only): reward `judge_reward`, 1 - its mean distance from the scaled gold
      rewards, 0 if unparsed (component `judge`);
    - not available: the policy judges once; each response's reward is its score (component
      `ruler`), 0 if the judgement is unparsed; the judgement is not trained.

    Each response records `gold_reward` and `judge_success` (whether a judgement was parsed); each
    judgement its own `judge_success`; the group `ground_truth` (available), `judge_success_rate`
    (parsed judgements of those asked) and, when not available, `judge_reply`.

    Where it differs: Trinity's draw is numpy's global random state; here Python's. A reward
    function that fails, or a judge prompt over `model.max_prompt_tokens` (not truncated), counts as
    no reference answer, resp. unparsed judgements. With rfthpc's `math_reward` (accuracy only,
    without Trinity's format term) the gold rewards are 0 or 1, scaled to 1/12 and 11/12 as Trinity
    scales its own.
    """
    sampled = sample_group(task, ctx, ctx.prompts.messages(task, policy_system_prompt(task)))
    if sampled is None:
        return WorkflowResult([], {"skipped": SKIPPED})
    prompt, completions = sampled
    texts = [c.text for c in completions]
    gold = gold_scores(task, ctx, texts)
    infos, info = gold_infos(gold, len(texts))
    chance = task.workflow_args.get("ground_truth_probability", GROUND_TRUTH_PROBABILITY)
    available = gold is not None and gold.error is None and random.random() < chance
    judge_prompt, replies, judged = self_judgements(task, ctx, texts, task.repeat_times if available else 1)
    parsed = [s for s in judged if s is not None]
    for i in infos:
        i["judge_success"] = bool(parsed)
    info.update(ground_truth=available, judge_success_rate=len(parsed) / len(judged) if judged else 0.0)
    if not available:
        # The mean over parsed judgements, as Trinity takes it (one judgement here).
        scores = [sum(column) / len(parsed) for column in zip(*parsed, strict=True)] if parsed else [0.0] * len(texts)
        info["judge_reply"] = replies[0].text if replies else None
        return group_result(prompt, completions, scores, [{"ruler": s} for s in scores], infos, info)
    assert gold is not None
    result = group_result(prompt, completions, gold.rewards, gold.components, infos, info)
    for reply, scores in zip(replies, judged, strict=True):
        reward = judge_reward(scores, gold.rewards)
        result.experiences.append(Experience.from_completion(
            judge_prompt, reply, reward, reward_components={"judge": reward},
            info={SUBGROUP: JUDGE, "judge_success": scores is not None}))
    return result
