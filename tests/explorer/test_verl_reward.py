"""`verl_reward`: veRL's reward row by row, by the row's data source or the user's veRL function."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.dialects.verl_data import unscored
from rfthpc.rewards.math_reward import accuracy_reward
from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.scoring import score_group
from rfthpc.rewards.verl_reward import verl_reward
from rfthpc.tasks.tasksets import Task


def task(source: str, truth: str, **raw) -> Task:
    row = {"data_source": source, "reward_model": {"ground_truth": truth, "style": "rule"},
           "extra_info": {"index": 3}, **raw}
    return Task(task_id="t/0", taskset="t", index=0, raw=row, prompt="q", truth=truth, workflow="simple_workflow",
                reward_fn="verl_reward")


def test_strict_gsm8k_reads_only_the_marked_answer() -> None:
    """veRL's GSM8K score takes the answer after `####` only; rfthpc's default also reads a last number."""
    assert accuracy_reward("so 42", "42") == {"accuracy": 1.0}
    assert accuracy_reward("so 42", "42", strict=True) == {"accuracy": 0.0}
    assert accuracy_reward("\\boxed{42}", "42", strict=True) == {"accuracy": 0.0}
    assert accuracy_reward("30 + 12\n#### 42", "42", strict=True) == {"accuracy": 1.0}


@pytest.mark.parametrize(("source", "response", "truth", "reward"), [
    ("openai/gsm8k", "6 * 7 = 42\n#### 42", "42", 1.0),
    ("openai/gsm8k", "6 * 7 = 42", "42", 0.0),  # no `####`: veRL's strict extraction finds no answer
    ("lighteval/MATH", "so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),
    ("DigitalLearningGmbH/MATH-lighteval", "1/2", "\\frac{1}{2}", 0.0),  # MATH needs a box
])
def test_each_row_is_scored_by_its_data_source(source: str, response: str, truth: str, reward: float) -> None:
    assert sum(verl_reward(response, truth, task(source, truth)).values()) == reward


def test_a_data_source_without_an_rfthpc_scorer_fails_its_group() -> None:
    assert unscored("openai/gsm8k") is None
    assert "Answer:" in unscored("aime2024") and "sandbox" in unscored("codecontests")
    assert "does not know" in unscored("my/own_data")
    outcome = score_group(REWARDS.get("verl_reward"), "verl_reward", ["#### 1"], "1", {},
                          {"task": task("codecontests", "1")})
    assert outcome.rewards == [0.0] and "codecontests" in (outcome.error or "")
    with pytest.raises(ValueError, match="no 'source'"):
        verl_reward("x", "1", task("openai/gsm8k", "1"), data_source_key="source")


def test_the_users_verl_function_gets_verls_arguments(tmp_path: Path) -> None:
    """A veRL custom_reward_function takes (data_source, solution_str, ground_truth, extra_info, **kwargs)
    and may return a dict whose `score` is the reward."""
    source = tmp_path / "my_reward.py"
    source.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    ok = solution_str.strip() == ground_truth\n"
        "    return {'score': float(ok) + bonus + extra_info['index'], 'acc': ok, 'pred': solution_str,\n"
        "            'src': data_source}\n")
    args = {"compute_score": f"{source}:compute_score", "reward_kwargs": {"bonus": 0.5}}
    outcome = score_group(REWARDS.get("verl_reward"), "verl_reward", ["7", "8"], "7", args,
                          {"task": task("anything", "7"), "prompt": "q"})
    assert outcome.error is None and outcome.rewards == [4.5, 3.5]
    assert outcome.components[0] == {"score": 4.5}
    REWARDS.check("verl_reward", args)
