"""Trinity-RFT's workflows by their names, run on the tiny model: math_boxed_workflow, math_dapo_workflow,
math_workflow with countdown_reward, rubric_judge_workflow, math_rm_workflow and toolcall_workflow.

The policy and the judges are `HFEngine`s (tests/explorer/test_workflows.py): the real tiny model,
decoding constrained to given texts, so the replies are known and their tokens and logprobs are
the model's own. A judge's reply is chosen by what its prompt holds (`Judge`), so each response of
a group gets its own verdict.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import ConfigError, UserError
from rfthpc.tasks.tasksets import PromptBuilder, Task
from rfthpc.workflows.base import AuxiliaryModel, WorkflowContext
from rfthpc.workflows.judge import RUBRIC_JUDGE_SYSTEM_PROMPT, RUBRIC_SYSTEM_PROMPT, parse_rating, parse_verdict
from rfthpc.workflows.math import BOXED_SYSTEM_PROMPT, BOXED_THINK_SYSTEM_PROMPT, MATH_SYSTEM_PROMPT
from rfthpc.workflows.registry import WORKFLOWS, run_workflow
from rfthpc.workflows.toolcall import TOOL_PROMPT
from tests.explorer.test_workflows import HFEngine

QUESTION = "Tom has 30 apples. Tom buys 12 more apples. How many apples does Tom have now?"
TRUTH = "30 + 12 = 42\n#### 42"


class Judge(HFEngine):
    """An auxiliary engine on the tiny model whose reply to a prompt is `reply_for(prompt text)`."""

    def __init__(self, model_dir: Path, reply_for: Callable[[str], str]) -> None:
        super().__init__(model_dir)
        self.reply_for = reply_for
        self.asked: list[tuple[str, SamplingArgs]] = []

    def _one(self, prompt, n, params):
        text = self.tokenizer.decode(prompt)
        self.asked.append((text, params))
        self.forced = [self.tokenizer.encode(self.reply_for(text), add_special_tokens=False) + [self.eos]]
        # The reply is forced, so the temperature does not matter; transformers refuses 0 when sampling.
        return super()._one(prompt, n, dataclasses.replace(params, temperature=1.0))


def _task(workflow: str, reward_fn: str | None = None, truth: str | None = TRUTH, repeat: int = 3, **kw) -> Task:
    kw.setdefault("rollout_args", SamplingArgs(max_tokens=96))
    return Task("t/0", "t", 0, kw.pop("raw", {}), kw.pop("prompt", QUESTION), truth, workflow, reward_fn,
                repeat_times=repeat, **kw)


def _ctx(engine, tokenizer, **auxiliary) -> WorkflowContext:
    return WorkflowContext(engine, PromptBuilder(tokenizer), auxiliary=auxiliary)


def _judge(model_dir: Path, tokenizer, reply_for: Callable[[str], str], **prompt_kw) -> AuxiliaryModel:
    return AuxiliaryModel("judge", Judge(model_dir, reply_for), PromptBuilder(tokenizer, **prompt_kw))


def _system(tokenizer, experience) -> str:
    """The system message of an experience's prompt."""
    return tokenizer.decode(experience.prompt_token_ids).split("<|im_start|>system\n", 1)[1].split("<|im_end|>")[0]


def test_math_boxed_workflow_prompts_and_scores_boxed_answers(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(0)
    replies = ["<think>30 + 12</think> so \\boxed{42}", "\\boxed{41}", "It is 42."]
    ctx = _ctx(HFEngine(tiny_model, forced=replies), tokenizer)
    plain = run_workflow(_task("math_boxed_workflow"), ctx)
    assert [e.reward for e in plain.experiences] == [1.0, 0.0, 0.0]
    assert plain.experiences[0].reward_components == {"accuracy": 1.0}
    assert _system(tokenizer, plain.experiences[0]) == BOXED_SYSTEM_PROMPT
    assert plain.experiences[0].response_text == replies[0]

    think = run_workflow(_task("math_boxed_workflow", workflow_args={"with_think": True, "format_score_coef": 0.2}),
                         ctx)
    assert [e.reward_components for e in think.experiences] == [
        {"accuracy": 1.0, "format_score": 0.0}, {"accuracy": 0.0, "format_score": -0.2},
        {"accuracy": 0.0, "format_score": -0.2}]
    assert [e.reward for e in think.experiences] == [1.0, -0.2, -0.2]
    assert _system(tokenizer, think.experiences[0]) == BOXED_THINK_SYSTEM_PROMPT

    # The taskset's system prompt wins; the taskset's reward (DAPO's, Trinity's DAPO example) is used.
    dapo = run_workflow(_task("math_boxed_workflow", "math_dapo_reward", system_prompt="Box it."), ctx)
    assert [e.reward for e in dapo.experiences] == [1.0, -1.0, -1.0]
    assert _system(tokenizer, dapo.experiences[0]) == "Box it."


def test_use_base_prompts_as_plain_text(tiny_model: Path, tokenizer) -> None:
    ctx = _ctx(HFEngine(tiny_model, forced=["\\boxed{42}"]), tokenizer)
    boxed = run_workflow(_task("math_boxed_workflow", repeat=1, workflow_args={"use_base": True}), ctx)
    (e,) = boxed.experiences
    assert tokenizer.decode(e.prompt_token_ids) == f"System:{BOXED_SYSTEM_PROMPT}\nUser:\n{QUESTION}\nAssistant:\n"
    assert e.reward == 1.0
    dapo = run_workflow(_task("math_dapo_workflow", repeat=1, workflow_args={"use_base": True},
                              reply_prefix="Let me see."), ctx)
    (e,) = dapo.experiences
    # No default system prompt; the reply prefix ends the prompt.
    assert tokenizer.decode(e.prompt_token_ids) == f"User:\n{QUESTION}\nAssistant:\nLet me see."
    assert e.reward == 1.0 and e.reward_components == {"accuracy": 1.0}


def test_math_dapo_workflow_rewards_plus_or_minus_one(tiny_model: Path, tokenizer) -> None:
    ctx = _ctx(HFEngine(tiny_model, forced=["\\boxed{42}", "\\boxed{40}"]), tokenizer)
    result = run_workflow(_task("math_dapo_workflow", repeat=2), ctx)
    assert [e.reward for e in result.experiences] == [1.0, -1.0]
    assert "<|im_start|>system" not in tokenizer.decode(result.experiences[0].prompt_token_ids)


def test_workflow_arguments_are_checked(tiny_model: Path, tokenizer) -> None:
    """Trinity's overlong settings are not the workflows' own: loading the config reads them as
    algorithm.overlong_buffer (tests/config/test_trinity_workflow_config.py), so here they are not taken."""
    ctx = _ctx(HFEngine(tiny_model, forced=["\\boxed{42}"]), tokenizer)
    for workflow in ("math_boxed_workflow", "math_dapo_workflow"):
        with pytest.raises(ConfigError, match=f"'cache_length' not used by workflow '{workflow}'"):
            run_workflow(_task(workflow, workflow_args={"use_base": True, "cache_length": 4096}), ctx)
    with pytest.raises(ConfigError, match="format_score_coef: -1; use a number >= 0"):
        run_workflow(_task("math_boxed_workflow", workflow_args={"format_score_coef": -1}), ctx)
    with pytest.raises(ConfigError, match="use_base: 'yes'; use true or false"):
        run_workflow(_task("math_boxed_workflow", workflow_args={"use_base": "yes"}), ctx)


def test_math_workflow_leaves_its_answer_format_to_its_own_reward(tiny_model: Path, tokenizer) -> None:
    """Trinity's countdown example: math_workflow with countdown_reward, the question saying how to answer."""
    game = json.dumps({"target": 24, "numbers": [3, 4, 2]})
    replies = ["<think>3*4*2</think> <answer>3 * 4 * 2</answer>", "<answer>3 + 4 + 2</answer>", "24"]
    ctx = _ctx(HFEngine(tiny_model, forced=replies), tokenizer)
    question = "Using the numbers [3, 4, 2], create an equation that equals 24. Answer in <answer> </answer> tags."
    result = run_workflow(_task("math_workflow", "countdown_reward", truth=game, prompt=question), ctx)
    assert [e.reward for e in result.experiences] == [1.0, 0.1, 0.0]
    assert tokenizer.decode(result.experiences[0].prompt_token_ids).startswith("<|im_start|>user\n")
    gsm = run_workflow(_task("math_workflow", repeat=1), _ctx(HFEngine(tiny_model, forced=["#### 42"]), tokenizer))
    assert _system(tokenizer, gsm.experiences[0]) == MATH_SYSTEM_PROMPT


RUBRIC = [{"weight": 3, "description": "Says to drink water"}, {"weight": 1, "description": "Is short"}]


def rubric_reply(prompt: str) -> str:
    if "water please" in prompt:
        return '```json\n{\n"rating": 10\n}\n```'
    if "sleep now" in prompt:
        return "It is fine, I would say 7."
    return '```json\n{"rating": 4}\n```'


def test_rubric_judge_workflow_rewards_the_judges_rating(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(1)
    policy = HFEngine(tiny_model, forced=["Drink water please.", "Just sleep now.", "Ask a doctor."])
    judge = _judge(tiny_model, tokenizer, rubric_reply)
    result = run_workflow(_task("rubric_judge_workflow", truth=None, prompt="I have a headache.",
                                raw={"rubric": RUBRIC}), _ctx(policy, tokenizer, judge=judge))
    assert [e.reward for e in result.experiences] == [1.0, 0.0, pytest.approx(3 / 9)]
    assert [e.reward_components["rubric"] for e in result.experiences] == [e.reward for e in result.experiences]
    assert [e.info["judge_success"] for e in result.experiences] == [True, False, True]
    assert result.info["judge_success_rate"] == pytest.approx(2 / 3)
    assert result.experiences[1].info["judge_reply"] == "It is fine, I would say 7."
    assert _system(tokenizer, result.experiences[0]) == RUBRIC_SYSTEM_PROMPT
    engine = judge.engine
    assert len(engine.asked) == 3 and engine.calls == 1, "the group's judgements go to the engine in one call"
    prompt, params = engine.asked[0]
    assert prompt.startswith(f"<|im_start|>system\n{RUBRIC_JUDGE_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n")
    assert ("<prompt>\nI have a headache.\n</prompt>\n<response>\nDrink water please.\n</response>\n<rubrics>\n"
            "Rubric 0 (weight: 3): Says to drink water\nRubric 1 (weight: 1): Is short\n</rubrics>\n"
            "Your JSON Evaluation:<|im_end|>") in prompt
    assert params.temperature == 0.0 and params.max_tokens == SamplingArgs.max_tokens


def test_a_judge_prompt_over_the_judges_limit_scores_zero(tiny_model: Path, tokenizer) -> None:
    policy = HFEngine(tiny_model, forced=["Drink water please."])
    judge = _judge(tiny_model, tokenizer, rubric_reply, max_prompt_tokens=50, enable_prompt_truncation=False)
    result = run_workflow(_task("rubric_judge_workflow", truth=None, repeat=2, raw={"rubric": json.dumps(RUBRIC)}),
                          _ctx(policy, tokenizer, judge=judge))
    assert [e.reward for e in result.experiences] == [0.0, 0.0]
    assert [e.info["judge_success"] for e in result.experiences] == [False, False]
    assert judge.engine.calls == 0


@pytest.mark.parametrize(("reply", "score"), [
    ('```json\n{"rating": 7}\n```', 6 / 9),
    ('Here: ```\n{"rating": 1}\n``` done', 0.0),
    ('```json\n{"rating": 10.0}```', 1.0),
    ('```json\n{"rating": 11}\n```', None),
    ('```json\n{"rating": "7"}\n```', None),
    ('```json\n[7]\n```', None),
    ('```json\n{"rating": 7}', None),  # not closed
    ('{"rating": 7}', None),  # not fenced
    ('```json\n{rating: 7}\n```', None),
])
def test_parse_rating(reply: str, score: float | None) -> None:
    assert parse_rating(reply) == (pytest.approx(score) if score is not None else None)


def rm_reply(prompt: str) -> str:
    if "\\boxed{42}" in prompt:
        return "<think>No mistakes: no.</think>Yes"
    if "\\boxed{41}" in prompt:
        return "No, 30 + 12 is 42."
    return "I cannot tell."


def test_math_rm_workflow_rewards_the_reward_models_verdict(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(2)
    policy = HFEngine(tiny_model, forced=["\\boxed{42}", "\\boxed{41}", "Maybe 40."])
    rm = _judge(tiny_model, tokenizer, rm_reply)
    result = run_workflow(_task("math_rm_workflow"), _ctx(policy, tokenizer, verifier=rm))
    assert [e.reward for e in result.experiences] == [1.0, 0.0, 0.0]
    assert [e.reward_components for e in result.experiences] == [{"rm": 1.0}, {"rm": 0.0}, {"rm": 0.0}]
    assert [e.info["judge_success"] for e in result.experiences] == [True, True, False]
    assert "<|im_start|>system" not in tokenizer.decode(result.experiences[0].prompt_token_ids)
    prompt, _ = rm.engine.asked[0]
    assert f"Problem:\n{QUESTION}\n\nReference answer:\n42\n\nSolution:\n\\boxed{{42}}\n\n" in prompt
    without = run_workflow(_task("math_rm_workflow", truth=None, repeat=1), _ctx(policy, tokenizer, verifier=rm))
    assert without.experiences[0].reward == 1.0
    assert "Reference answer" not in rm.engine.asked[-1][0]


@pytest.mark.parametrize(("reply", "verdict"), [
    ("Yes", 1.0), ("no.", 0.0), ("<think>yes? no...</think>\nNo", 0.0), ("Yesterday", None), ("", None),
])
def test_parse_verdict(reply: str, verdict: float | None) -> None:
    assert parse_verdict(reply) == verdict


def test_the_judge_is_found_by_name_or_alone(tiny_model: Path, tokenizer) -> None:
    policy = HFEngine(tiny_model, forced=["\\boxed{42}"])
    rm = _judge(tiny_model, tokenizer, rm_reply)
    with pytest.raises(ConfigError, match="workflow 'math_rm_workflow' asks an auxiliary model .* and "
                                          "explorer.auxiliary_models is empty"):
        run_workflow(_task("math_rm_workflow"), _ctx(policy, tokenizer))
    with pytest.raises(ConfigError, match="workflow_args.reward_model: workflow 'math_rm_workflow' asks one auxiliary "
                                          "model; name which of a, b"):
        run_workflow(_task("math_rm_workflow"), _ctx(policy, tokenizer, a=rm, b=rm))
    with pytest.raises(ConfigError, match="workflow_args.judge_model: 'c' is not an auxiliary model of the explorers; "
                                          "explorer.auxiliary_models are: a, b"):
        run_workflow(_task("rubric_judge_workflow", workflow_args={"judge_model": "c"}), _ctx(policy, tokenizer, a=rm,
                                                                                               b=rm))
    chosen = run_workflow(_task("math_rm_workflow", repeat=1, workflow_args={"reward_model": "b"}),
                          _ctx(policy, tokenizer, a=_judge(tiny_model, tokenizer, lambda _: "No"), b=rm))
    assert chosen.experiences[0].reward == 1.0


TOOLS = [{"name": "weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
CALL = [{"name": "weather", "arguments": {"city": "Oslo"}}]
ROW = {
    "raw_system": "You are an expert in composing functions. Here is a list of functions in JSON format that you "
                  "can invoke:\n",
    "tools": json.dumps(TOOLS),
    "conversations": [{"from": "user", "value": "Weather in Oslo?"}],
    "answer": json.dumps(CALL),
}


@pytest.mark.parametrize("name", ["toolcall_workflow", "tool_call_workflow"])
def test_toolcall_workflow_scores_the_calls(tiny_model: Path, tokenizer, name: str) -> None:
    replies = [f"<think>Use weather.</think><tool_call>{json.dumps(CALL)}</tool_call>",
               f"<tool_call>{json.dumps(CALL)}</tool_call>", "<think>none</think> I cannot."]
    ctx = _ctx(HFEngine(tiny_model, forced=replies), tokenizer)
    result = run_workflow(_task(name, truth=ROW["answer"], prompt=ROW["raw_system"], raw=ROW,
                                rollout_args=SamplingArgs(max_tokens=256)), ctx)
    assert [e.reward for e in result.experiences] == [1.0, 0.0, 0.0]
    tools = json.dumps({"type": "function", "function": TOOLS[0]})
    system = ROW["raw_system"] + TOOL_PROMPT.format(tools=tools)
    assert tokenizer.decode(result.experiences[0].prompt_token_ids) == (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert WORKFLOWS.get(name) is WORKFLOWS.get("toolcall_workflow")


def test_toolcall_workflow_needs_toolace_columns(tiny_model: Path, tokenizer) -> None:
    ctx = _ctx(HFEngine(tiny_model, forced=["x"]), tokenizer)
    with pytest.raises(UserError, match="toolcall_workflow needs the columns raw_system, tools and conversations; "
                                        "missing: tools, conversations"):
        run_workflow(_task("toolcall_workflow", truth=ROW["answer"], raw={"raw_system": "s"}), ctx)
