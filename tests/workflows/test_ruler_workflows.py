"""Trinity-RFT's RULER workflows on the tiny model: math_ruler_workflow (an auxiliary judge scores the
whole group at once) and math_trainable_ruler_workflow (the policy judges its own group, and its
judgements are trained where the reference answer counts as available).

The engines are test_trinity_workflows' `HFEngine`s: the real tiny model, decoding constrained to given
texts; `Prompted` chooses those texts by what the prompt holds, so one policy engine both answers
and judges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import ConfigError
from rfthpc.explorer.eval import eval_metrics
from rfthpc.explorer.judged import judge_metrics
from rfthpc.explorer.rollout import TaskOutcome
from rfthpc.store.schema import SUBGROUP
from rfthpc.workflows.registry import run_workflow
from rfthpc.workflows.ruler import THINK_ANSWER_SYSTEM_PROMPT, parse_ruler_scores
from tests.explorer.test_workflows import HFEngine
from tests.workflows.test_trinity_workflows import QUESTION, _ctx, _judge, _system, _task

RIGHT, WRONG, NONE = "<think>30 + 12</think> <answer>42</answer>", "<think>30 + 11</think> <answer>41</answer>", "Hm."

RULER_SYSTEM = ("You are a fair judge. The user will provide a question and 3 candidate solutions to it. Your task is "
                "to compare the solutions, see how well they resolve the question, and assign a score within the "
                "range [0, 1] for each solution.")
RULER_USER = f"""
Below is a question and several candidate solutions.

Question: {QUESTION}

Solution format requirement: first thinks about the reasoning process in the mind and then provides the final \
answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, \
respectively, i.e.,
<think> reasoning process here </think>
<answer> answer here </answer>.

Candidate solution 1: {RIGHT}

Candidate solution 2: {WRONG}

Candidate solution 3: {NONE}

Please assign a score within the range [0, 1] for each of them, reflecting how well they solve the question.
You may compare them against each other and think step by step before returning your final scores, but keep \
your reasoning process brief and concise when possible.

Conclude your response with a list of scores, in the following format: [score for solution 1, score for \
solution 2, ..., score for solution 3]
"""
"""Trinity-RFT's judge chat for QUESTION and RIGHT, WRONG, NONE, written out."""


class Prompted(HFEngine):
    """An engine on the tiny model whose i-th sample for a prompt is `texts_for(prompt text)[i]`."""

    def __init__(self, model_dir: Path, texts_for: Callable[[str], Sequence[str]]) -> None:
        super().__init__(model_dir)
        self.texts_for = texts_for
        self.asked: list[tuple[str, int, SamplingArgs]] = []

    def _one(self, prompt, n, params):
        text = self.tokenizer.decode(prompt)
        self.asked.append((text, n, params))
        self.forced = [self.tokenizer.encode(t, add_special_tokens=False) + [self.eos] for t in self.texts_for(text)]
        # The replies are forced, so the temperature does not matter; transformers refuses 0 when sampling.
        return super()._one(prompt, n, dataclasses.replace(params, temperature=1.0))


def _chat(system: str, user: str) -> str:
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(("reply", "scores"), [
    ("Solution 1 is right.\n[1.0, 0.3, 0]", [1.0, 0.3, 0.0]),
    ("[1.5, -0.2, 1e999]", [1.0, 0.0, 1.0]),  # clipped to [0, 1]
    ("First [0, 0, 0], on reflection [1, 0.5, 0.25]", [1.0, 0.5, 0.25]),  # the last list counts
    ("[1, 0, 0,]", [1.0, 0.0, 0.0]),
    ("[0.5, 0.5]", None),  # one score short
    ("[0.5, 0.5, 0.5, 0.5]", None),  # one too many (what Trinity's prompt, asking up to solution n + 1, invites)
    ("[0.9, high, 0.1]", None),
    ("['1', '0', '1']", None),
    ("[[1, 0, 0]]", None),
    ("Scores: 1, 0, 0", None),
    ("] 1, 0, 0 [", None),
    ("", None),
])
def test_parse_ruler_scores(reply: str, scores: list[float] | None) -> None:
    assert parse_ruler_scores(reply, 3) == scores


def test_math_ruler_workflow_rewards_the_judges_scores_of_the_whole_group(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(3)
    policy = HFEngine(tiny_model, forced=[RIGHT, WRONG, NONE])
    judge = _judge(tiny_model, tokenizer, lambda _: "Solution 1 is right, 2 is close. [1, 0.4, 0]")
    result = run_workflow(_task("math_ruler_workflow"), _ctx(policy, tokenizer, judge=judge))
    assert [e.reward for e in result.experiences] == [1.0, 0.4, 0.0]
    assert [e.reward_components for e in result.experiences] == [{"ruler": 1.0}, {"ruler": 0.4}, {"ruler": 0.0}]
    # math_reward on the reference answer is a record, not the reward.
    assert [(e.info["gold_reward"], e.info["judge_success"]) for e in result.experiences] == [
        (1.0, True), (0.0, True), (0.0, True)]
    assert result.info["judge_success_rate"] == 1.0
    assert result.info["judge_reply"] == "Solution 1 is right, 2 is close. [1, 0.4, 0]"
    assert _system(tokenizer, result.experiences[0]) == THINK_ANSWER_SYSTEM_PROMPT
    engine = judge.engine
    assert engine.calls == 1 and len(engine.asked) == 1, "one judgement of the whole group"
    prompt, params = engine.asked[0]
    assert prompt == _chat(RULER_SYSTEM, RULER_USER)
    assert params.temperature == 0.0


def test_the_gold_reward_and_the_judges_success_are_explorer_metrics(tiny_model: Path, tokenizer) -> None:
    """Trinity's gold_reward and judge_success metrics: eval/<taskset>/... and rollout/... (judge_metrics)."""
    policy = HFEngine(tiny_model, forced=[RIGHT, WRONG, NONE])
    judge = _judge(tiny_model, tokenizer, lambda _: "[0.5, 0.4, 0]")
    task = _task("math_ruler_workflow")
    result = run_workflow(task, _ctx(policy, tokenizer, judge=judge))
    metrics = eval_metrics("gsm", [TaskOutcome(task, result)])
    assert metrics["eval/gsm/reward_mean"] == pytest.approx(0.3) and metrics["eval/gsm/ruler"] == pytest.approx(0.3)
    assert metrics["eval/gsm/gold_reward"] == pytest.approx(1 / 3) and metrics["eval/gsm/judge_success"] == 1.0
    infos = [{"judge_success": False}, {"judge_success": True, "gold_reward": 0.5}, {"turns": 2}]
    assert judge_metrics("rollout", infos) == {"rollout/judge_success": 0.5, "rollout/gold_reward": 0.5}
    assert judge_metrics("rollout", [{"turns": 2}]) == {}


@pytest.mark.parametrize("reply", ["All fine: [1, 1]", "I cannot judge these."])
def test_an_unparsed_judgement_scores_the_group_zero(tiny_model: Path, tokenizer, reply: str) -> None:
    policy = HFEngine(tiny_model, forced=[RIGHT, WRONG, NONE])
    result = run_workflow(_task("math_ruler_workflow"), _ctx(policy, tokenizer, judge=_judge(tiny_model, tokenizer,
                                                                                            lambda _: reply)))
    assert [e.reward for e in result.experiences] == [0.0, 0.0, 0.0]
    assert [e.info["judge_success"] for e in result.experiences] == [False, False, False]
    assert result.info["judge_success_rate"] == 0.0 and result.info["judge_reply"] == reply


def test_math_ruler_workflow_without_math_reward_or_reference_answer(tiny_model: Path, tokenizer) -> None:
    """Another reward function: no default system prompt (Trinity's condition); no reference answer: no gold
    reward; a judge prompt over the judge's limit: no judgement, rewards 0."""
    policy = HFEngine(tiny_model, forced=["\\boxed{42}", "\\boxed{41}"])
    judge = _judge(tiny_model, tokenizer, lambda _: "[0.75, 0.25]")
    boxed = run_workflow(_task("math_ruler_workflow", "math_boxed_reward", repeat=2), _ctx(policy, tokenizer, j=judge))
    assert [e.reward for e in boxed.experiences] == [0.75, 0.25]
    assert [e.info["gold_reward"] for e in boxed.experiences] == [1.0, 0.0]
    assert "<|im_start|>system" not in tokenizer.decode(boxed.experiences[0].prompt_token_ids)
    without = run_workflow(_task("math_ruler_workflow", truth=None, repeat=2), _ctx(policy, tokenizer, j=judge))
    assert [e.reward for e in without.experiences] == [0.75, 0.25]
    assert "gold_reward" not in without.experiences[0].info
    small = _judge(tiny_model, tokenizer, lambda _: "[1, 1]", max_prompt_tokens=50, enable_prompt_truncation=False)
    skipped = run_workflow(_task("math_ruler_workflow", repeat=2), _ctx(policy, tokenizer, j=small))
    assert [e.reward for e in skipped.experiences] == [0.0, 0.0] and small.engine.calls == 0
    assert skipped.info["judge_reply"] is None


def _self_judging(tiny_model: Path, judgements: Sequence[str]) -> Prompted:
    """The policy: RIGHT and WRONG to the task, `judgements` to RULER's prompt."""
    return Prompted(tiny_model, lambda prompt: judgements if "You are a fair judge" in prompt else [RIGHT, WRONG])


def test_with_the_reference_answer_the_policys_judgements_are_trained(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(4)
    policy = _self_judging(tiny_model, ["Right, wrong, right: [1, 0, 0.5]", "[0.5]", "[1, 1, 1]"])
    task = _task("math_trainable_ruler_workflow", repeat=3, workflow_args={"ground_truth_probability": 1})
    result = run_workflow(task, _ctx(policy, tokenizer))
    answers, judgements = result.experiences[:3], result.experiences[3:]
    # The responses: rewarded on the reference answer (math_reward), never by the judge.
    assert [e.reward for e in answers] == [1.0, 0.0, 1.0]
    assert [e.reward_components for e in answers] == [{"accuracy": 1.0}, {"accuracy": 0.0}, {"accuracy": 1.0}]
    assert all(SUBGROUP not in e.info and e.info["judge_success"] for e in answers)
    # repeat_times judgements, each rewarded 1 - its mean distance from the gold scores (gold + 0.1) / 1.2.
    gold = [1.1 / 1.2, 0.1 / 1.2, 1.1 / 1.2]
    first = 1 - (abs(1 - gold[0]) + abs(0 - gold[1]) + abs(0.5 - gold[2])) / 3
    third = 1 - (abs(1 - gold[0]) + abs(1 - gold[1]) + abs(1 - gold[2])) / 3
    assert [e.reward for e in judgements] == [pytest.approx(first), 0.0, pytest.approx(third)]
    assert [e.reward_components["judge"] for e in judgements] == [e.reward for e in judgements]
    assert [(e.info[SUBGROUP], e.info["judge_success"]) for e in judgements] == [
        ("judge", True), ("judge", False), ("judge", True)]
    assert [e.response_text for e in judgements] == ["Right, wrong, right: [1, 0, 0.5]", "[0.5]", "[1, 1, 1]"]
    assert all(e.loss_mask == [1] * len(e.response_token_ids) for e in judgements)
    assert result.info["ground_truth"] is True and result.info["judge_success_rate"] == pytest.approx(2 / 3)
    (_, n_answers, params), (judge_prompt, n_judgements, judge_params) = policy.asked
    assert (n_answers, n_judgements) == (3, 3) and judge_params == params == task.rollout_args
    # The judgement's prompt: RULER's chat in the policy's template.
    assert tokenizer.decode(judgements[0].prompt_token_ids) == judge_prompt
    assert judge_prompt.startswith("<|im_start|>system\nYou are a fair judge. The user will provide a question and 3 ")
    assert f"Candidate solution 2: {WRONG}\n\nCandidate solution 3: {RIGHT}\n" in judge_prompt


def test_without_the_reference_answer_the_policy_judges_once_for_the_rewards(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(5)
    policy = _self_judging(tiny_model, ["[0.75, 0.25]"])
    result = run_workflow(_task("math_trainable_ruler_workflow", repeat=2,
                                workflow_args={"ground_truth_probability": 0}), _ctx(policy, tokenizer))
    assert [e.reward for e in result.experiences] == [0.75, 0.25], "no judgement is trained"
    assert [e.reward_components for e in result.experiences] == [{"ruler": 0.75}, {"ruler": 0.25}]
    assert [e.info["gold_reward"] for e in result.experiences] == [1.0, 0.0]
    assert result.info == {"prompt_truncated": False, "ground_truth": False, "judge_success_rate": 1.0,
                           "judge_reply": "[0.75, 0.25]"}
    assert [n for _, n, _ in policy.asked] == [2, 1]
    assert _system(tokenizer, result.experiences[0]) == THINK_ANSWER_SYSTEM_PROMPT
    unparsed = run_workflow(_task("math_trainable_ruler_workflow", repeat=2),
                            _ctx(_self_judging(tiny_model, ["Both fine."]), tokenizer))
    # By default the reference answer is available with probability 0.2: either way no judgement parses.
    assert unparsed.info["judge_success_rate"] == 0.0
    assert [e.info["judge_success"] for e in unparsed.experiences[:2]] == [False, False]


def test_ruler_workflow_settings_are_checked(tiny_model: Path, tokenizer) -> None:
    policy = HFEngine(tiny_model, forced=[RIGHT])
    with pytest.raises(ConfigError, match="workflow 'math_ruler_workflow' asks an auxiliary model .* and "
                                          "explorer.auxiliary_models is empty"):
        run_workflow(_task("math_ruler_workflow"), _ctx(policy, tokenizer))
    with pytest.raises(ConfigError, match="workflow_args.judge_model: 'c' is not an auxiliary model"):
        run_workflow(_task("math_ruler_workflow", workflow_args={"judge_model": "c"}),
                     _ctx(policy, tokenizer, j=_judge(tiny_model, tokenizer, lambda _: "[1]")))
    with pytest.raises(ConfigError, match="ground_truth_probability: 1.5; use a number from 0 to 1"):
        run_workflow(_task("math_trainable_ruler_workflow", workflow_args={"ground_truth_probability": 1.5}),
                     _ctx(policy, tokenizer))
    with pytest.raises(ConfigError, match="'judge_model' not used by workflow 'math_trainable_ruler_workflow'"):
        run_workflow(_task("math_trainable_ruler_workflow", workflow_args={"judge_model": "j"}),
                     _ctx(policy, tokenizer))
    with pytest.raises(ConfigError, match="workflow 'math_trainable_ruler_workflow' needs reference answers"):
        run_workflow(_task("math_trainable_ruler_workflow", truth=None), _ctx(policy, tokenizer))
