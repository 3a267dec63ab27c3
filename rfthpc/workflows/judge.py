"""Workflows whose reward comes from another model: an auxiliary model (`explorer.auxiliary_models`)
reads each response and its reply is parsed into the reward.

- `rubric_judge_workflow` (Trinity-RFT's): an LLM judge rates the response 1-10 against the task's
  rubric; reward (rating - 1) / 9.
- `math_rm_workflow` (Trinity-RFT's name): a generative reward model says whether the response's
  final answer is right; reward 1 or 0.

The judge sees its own chat, rendered with its own tokenizer and chat template (`AuxiliaryModel`),
and decodes greedily, at most its `max_response_tokens`. The group's judge requests go to its
engine in one call. A reply that cannot be parsed, or a judge prompt over the judge's
`max_prompt_tokens`, scores 0 and is marked `judge_success: false` in the experience's info.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rfthpc.engines.sampling import SamplingArgs
from rfthpc.rewards.math_reward import reference_answer
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import AuxiliaryModel, WorkflowContext, WorkflowResult, auxiliary_of, needs
from rfthpc.workflows.simple import SKIPPED, group_result, sample_group

Chat = list[dict[str, str]]


def judge_replies(judge: AuxiliaryModel, chats: Sequence[Sequence[Mapping[str, str]]]) -> list[str | None]:
    """The judge's greedy reply to each chat, asked in one engine call; None for a chat over its
    `max_prompt_tokens` (not truncated)."""
    prompts = [judge.prompts.encode(chat) for chat in chats]
    asked = [p.token_ids for p in prompts if p is not None]
    params = SamplingArgs(temperature=0.0, max_tokens=judge.max_response_tokens or SamplingArgs.max_tokens)
    replies = iter(judge.generate(asked, 1, params) if asked else [])
    return [next(replies)[0].text if p is not None else None for p in prompts]


def judged_group(
    task: Task, ctx: WorkflowContext, default_system_prompt: str | None, judge_key: str, component: str,
    chat_of: Callable[[str], Chat], score_of: Callable[[str], float | None],
) -> WorkflowResult:
    """Sample the task's group, ask the judge (`workflow_args[judge_key]`) `chat_of(response)` for
    each response, and reward each with `score_of(reply)` (None: unparsed, reward 0) as the reward
    component `component`."""
    judge = auxiliary_of(task, ctx, judge_key)
    sampled = sample_group(task, ctx, ctx.prompts.messages(task, default_system_prompt))
    if sampled is None:
        return WorkflowResult([], {"skipped": SKIPPED})
    prompt, completions = sampled
    replies = judge_replies(judge, [chat_of(c.text) for c in completions])
    scores = [score_of(r) if r is not None else None for r in replies]
    rewards = [s if s is not None else 0.0 for s in scores]
    infos = [{"judge_success": s is not None, "judge_reply": r} for s, r in zip(scores, replies, strict=True)]
    rate = sum(s is not None for s in scores) / len(scores) if scores else 0.0
    return group_result(prompt, completions, rewards, [{component: r} for r in rewards], infos,
                        {"judge_success_rate": rate})


RUBRIC_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer."
)
"""Trinity-RFT's `rubric_judge_workflow` system prompt for the policy (without its trailing spaces)."""

RUBRIC_JUDGE_SYSTEM_PROMPT = """You are an expert evaluator. Given a user prompt, a generated response, and a list of quality rubrics, please rate the overall quality of the response on a scale of 1 to 10 based on how well it satisfies the rubrics.
Consider all rubrics holistically when determining your score. A response that violates multiple rubrics should receive a lower score, while a response that satisfies all rubrics should receive a higher score.
Start your response with a valid JSON object that starts with "```json" and ends with "```". The JSON object should contain
a single key "rating" and the value should be an integer between 1 and 10.
Example response:
```json
{
"rating": 7
}```"""
"""Trinity-RFT's system prompt of the rubric judge (after RaR-Implicit, arXiv:2507.17746), its wording and
line breaks kept."""

RUBRIC_JUDGE_PROMPT = """Given the following prompt, response, and rubrics, please rate the overall quality of the response on a scale of 1 to 10 based
on how well it satisfies the rubrics.
<prompt>
{prompt}
</prompt>
<response>
{response}
</response>
<rubrics>
{rubrics}
</rubrics>
Your JSON Evaluation:"""
"""Trinity-RFT's user prompt of the rubric judge, its wording and line breaks kept."""


def rubric_lines(rubric: Any) -> str:
    """The rubric as the judge reads it: `Rubric <i> (weight: <w>): <description>` per item. `rubric` is
    the row's `rubric` column: a list of {"description", "weight"} (or that list as JSON text)."""
    items = json.loads(rubric) if isinstance(rubric, str) and rubric.strip() else rubric
    if not items:
        return "Rubrics are not provided."
    return "\n".join(f"Rubric {i} (weight: {item['weight']}): {item['description']}" for i, item in enumerate(items))


def parse_rating(reply: str) -> float | None:
    """The judge's rating normalised to [0, 1], (rating - 1) / 9; None if the reply has no fenced
    JSON block (```json ... ``` or ``` ... ```) whose "rating" is a number from 1 to 10.

    The first fenced block counts (Trinity's reading)."""
    start = reply.find("```json")
    opening = "```json" if start != -1 else "```"
    start = start if start != -1 else reply.find("```")
    end = reply.find("```", start + 3) if start != -1 else -1
    if start == -1 or end == -1:
        return None
    try:
        rating = json.loads(reply[start + len(opening):end]).get("rating")
    except (ValueError, AttributeError):
        return None
    if isinstance(rating, bool) or not isinstance(rating, (int, float)) or not 1 <= rating <= 10:
        return None
    return (rating - 1) / 9


@needs(args=("judge_model",), reward_fn=False, auxiliary="judge_model")
def rubric_judge_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Trinity-RFT's `rubric_judge_workflow` (rubrics as rewards, after arXiv:2507.17746): one turn with
    RUBRIC_SYSTEM_PROMPT (the taskset's `format.system_prompt` wins), then an LLM judge rates each
    response 1-10 against the row's `rubric` column (RUBRIC_JUDGE_*_PROMPT, Trinity's wording);
    reward (rating - 1) / 9 as the component `rubric`, 0 if the reply has no valid rating.

    workflow_args: `judge_model`, the auxiliary model that judges (default: the only one). Where
    it differs: Trinity asks its first auxiliary model, through its OpenAI server, at temperature 0
    with no token limit; here the judge is named, decodes greedily within its
    `max_response_tokens`, and a judge prompt over its `max_prompt_tokens` scores 0. Trinity records
    the group's judge success rate on each response; here each response's `judge_success` and the
    judge's reply are in its info, the rate in the group's.
    """
    rubrics = rubric_lines(task.raw.get("rubric"))

    def chat_of(response: str) -> Chat:
        user = RUBRIC_JUDGE_PROMPT.format(prompt=task.prompt, response=response, rubrics=rubrics)
        return [{"role": "system", "content": RUBRIC_JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]

    return judged_group(task, ctx, RUBRIC_SYSTEM_PROMPT, "judge_model", "rubric", chat_of, parse_rating)


RM_SYSTEM_PROMPT = (
    "You are a careful grader of math solutions. You compare the final answer of a solution with the "
    "reference answer, or, without one, check the solution yourself."
)
"""The reward model's system prompt (rfthpc's; Trinity-RFT's math_rm_workflow leaves the prompt to RM-Gallery)."""
RM_PROMPT = """Problem:
{problem}

{reference}Solution:
{response}

Is the final answer of the solution correct? Reply with one word: Yes or No."""
"""The reward model's question; `reference` is `Reference answer:\\n<answer>\\n\\n`, or empty without one."""

_VERDICT = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_verdict(reply: str) -> float | None:
    """1 for a reply whose first yes or no (after any `</think>`) is yes, 0 for no; None for neither."""
    found = _VERDICT.search(reply.rsplit("</think>", 1)[-1])
    return None if found is None else float(found.group(1).lower() == "yes")


@needs(args=("reward_model",), reward_fn=False, auxiliary="reward_model")
def math_rm_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """One turn (the taskset's own system prompt; there is no default), rewarded by a reward model
    served as an auxiliary model: it reads the problem, the reference answer if the taskset has
    one (`format.response_key`; a `#### 42` or `\\\\boxed{42}` solution gives `42`) and the response,
    and says Yes or No (RM_PROMPT); reward 1 for Yes, 0 for No or an unparsed reply, as the
    component `rm`.

    workflow_args: `reward_model`, the auxiliary model that grades (default: the only one).

    Where it differs from Trinity-RFT's `math_rm_workflow`: Trinity passes the chat and the
    reference answer to its taskset's reward function, in practice `rm_gallery_reward`, which calls
    an RM-Gallery reward model; RM-Gallery is not part of rfthpc. Here the reward model is a
    generative model of `explorer.auxiliary_models` (e.g. a verifier such as a general LLM or a
    model trained to grade math), asked with rfthpc's prompt above; a reward model with a scalar
    head cannot be served by the explorers' engines. A taskset's reward function is not used.
    """
    reference = f"Reference answer:\n{reference_answer(task.truth)}\n\n" if task.truth is not None else ""

    def chat_of(response: str) -> Chat:
        user = RM_PROMPT.format(problem=task.prompt, reference=reference, response=response)
        return [{"role": "system", "content": RM_SYSTEM_PROMPT}, {"role": "user", "content": user}]

    return judged_group(task, ctx, None, "reward_model", "rm", chat_of, parse_verdict)
