"""Rewards on hand-written completions, the registries, and scoring that survives a failing function."""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path

import numpy as np
import pytest

from rfthpc.errors import ConfigError
from rfthpc.rewards.format_reward import format_reward
from rfthpc.rewards.math_reward import (
    accuracy_reward,
    answers_equal,
    boxed_accuracy_reward,
    extract_answer,
    gold_answer,
)
from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.scoring import score_group
from rfthpc.workflows.registry import WORKFLOWS

GSM8K_TRUTH = "Tom has 30 + 12 = <<30+12=42>>42 apples.\n#### 42"


@pytest.mark.parametrize(
    "response",
    [
        "30 + 12 = 42\n#### 42",
        "#### 42.0",
        "#### $42",
        "The answer is $42$.",
        "So the total is \\boxed{42}.",
        "\\boxed{\\frac{84}{2}}",
        "He has 42 apples.",
        "#### 42 apples",
        "Step: 40 + 2 = 42.\n#### 42.",
        "#### 42 apples for 3 friends",  # the number opening the line, not math-verify's last one
        "#### **42**",
    ],
)
def test_right_and_equivalent_answers_score_one(response: str) -> None:
    assert accuracy_reward(response, GSM8K_TRUTH) == {"accuracy": 1.0}


@pytest.mark.parametrize(
    "response",
    [
        "#### 41",
        "30 + 12 = 42\n#### 43",  # the marked answer wins over earlier numbers
        "42 is close but I say 24",  # the last number is the answer
        "\\boxed{4.2}",
        "####",
        "#### 41 or 42",  # a hedge does not get the credit of its last number
        "I do not know.",
        "",
    ],
)
def test_wrong_or_missing_answers_score_zero(response: str) -> None:
    assert accuracy_reward(response, GSM8K_TRUTH) == {"accuracy": 0.0}


def test_answer_extraction_and_gold() -> None:
    assert extract_answer("a 1 b 2\n#### 3\nextra") == "3"
    assert extract_answer("x \\boxed{\\frac{1}{2}} y") == "\\frac{1}{2}"
    assert extract_answer("costs 1,000 dollars") == "1,000"
    assert extract_answer("temperature -3.5 today") == "-3.5"
    assert extract_answer("nothing") is None
    assert gold_answer(GSM8K_TRUTH) == "42" and gold_answer(" 7 ") == "7"
    assert answers_equal("1,000", "1000") and answers_equal("0.5", "\\frac{1}{2}") and not answers_equal("2", "3")
    assert answers_equal("-3", "-3.0")


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("#### 5 cups for 2 people", "5"),
        ("#### −18", "-18"),  # Unicode minus
        ("#### -$5", "-5"),
        ("#### $1,234.50 in all", "1,234.50"),
        ("#### 3/4", "3/4"),
        ("#### 2\\sqrt{3}", "2\\sqrt{3}"),  # no number opens it: the line whole, for math-verify
        ("#### x = 7", "x = 7"),
    ],
)
def test_the_number_opening_the_answer_line_is_the_answer(response: str, answer: str) -> None:
    assert extract_answer(response) == answer


def test_math_and_boxed_rewards_by_name() -> None:
    assert REWARDS.get("math_reward") is accuracy_reward
    assert REWARDS.get("accuracy_reward") is accuracy_reward
    assert boxed_accuracy_reward("#### 42", "42") == {"accuracy": 0.0}
    assert boxed_accuracy_reward("\\boxed{42}", "42") == {"accuracy": 1.0}
    with pytest.raises(ValueError, match="response_key"):
        accuracy_reward("#### 1", None)


def test_accuracy_works_off_the_main_thread() -> None:
    # math-verify's SIGALRM timeouts only work in the main thread; explorers may score in threads.
    results = []
    worker = threading.Thread(target=lambda: results.append(accuracy_reward("\\boxed{42}", GSM8K_TRUTH)))
    worker.start()
    worker.join()
    assert results == [{"accuracy": 1.0}]


def test_format_reward() -> None:
    assert format_reward("work\n#### 12") == {"format": 1.0}
    assert format_reward("\\boxed{x}", score=0.5) == {"format": 0.5}
    assert format_reward("the answer is 12") == {"format": 0.0}
    assert format_reward("<think>a</think> 3", pattern=r"^<think>.*</think>") == {"format": 1.0}
    with pytest.raises(ValueError, match="not a valid regex"):
        format_reward("x", pattern="(")


def test_registries_list_names_and_reject_unknown_ones() -> None:
    assert {"accuracy_reward", "math_reward", "math_boxed_reward", "format_reward"} <= set(REWARDS.names())
    assert {"math_workflow", "simple_workflow"} <= set(WORKFLOWS.names())
    with pytest.raises(ConfigError, match="unknown reward function 'acuracy'.*accuracy_reward.*module:function"):
        REWARDS.get("acuracy")
    with pytest.raises(ConfigError, match="unknown workflow 'math'.*math_workflow"):
        WORKFLOWS.get("math")


def length_penalty(response: str, truth: str | None, limit: int = 10) -> float:
    """A user reward for the `module:function` tests."""
    return -max(0, len(response) - limit) / 10


def test_user_functions_by_module_or_file(tmp_path: Path) -> None:
    assert REWARDS.get(f"{__name__}:length_penalty") is length_penalty
    source = tmp_path / "my_rewards.py"
    source.write_text("def exact(response, truth):\n    return float(response.strip() == truth)\n")
    fn = REWARDS.get(f"{source}:exact")
    assert fn("7", "7") == 1.0
    assert REWARDS.get(f"{source}:exact") is fn  # the file is imported once
    with pytest.raises(ConfigError, match="cannot import module 'no_such_pkg.rewards'.*PYTHONPATH"):
        REWARDS.get("no_such_pkg.rewards:fn")
    with pytest.raises(ConfigError, match="no callable 'missing'"):
        REWARDS.get(f"{source}:missing")
    with pytest.raises(ConfigError, match="does not exist"):
        REWARDS.get(f"{tmp_path}/nope.py:fn")
    with pytest.raises(ConfigError, match="module:function"):
        REWARDS.get(":fn")


def test_score_group_sums_components_and_passes_args() -> None:
    outcome = score_group(format_reward, "format_reward", ["#### 1", "no"], "1", {"score": 2.0}, {"prompt": "p"})
    assert outcome.rewards == [2.0, 0.0] and outcome.error is None
    assert outcome.components == [{"format": 2.0}, {"format": 0.0}]

    def both(response, truth):
        return {"a": 1.0, "b": 0.5}

    assert score_group(both, "both", ["x"], None, {}, {}).rewards == [1.5]

    def numpy_scores(response, truth):
        return {"hits": np.int64(2), "score": np.float32(0.25)}

    outcome = score_group(numpy_scores, "numpy_scores", ["x"], None, {}, {})
    assert outcome.rewards == [2.25] and outcome.error is None
    outcome = score_group(length_penalty, "len", ["x" * 30], None, {"limit": 20}, {"prompt": "p", "task": object()})
    assert outcome.rewards == [-1.0]


def test_score_group_passes_only_declared_optional_inputs() -> None:
    seen = {}

    def judge(response, truth, *, prompt, auxiliary):
        seen.update(prompt=prompt, auxiliary=auxiliary)
        return 1.0

    def catch_all(response, truth, **kwargs):
        seen["kwargs"] = sorted(kwargs)
        return 0.0

    extra = {"prompt": "P", "task": "T", "auxiliary": {"judge": "engine"}}
    score_group(judge, "judge", ["r"], "t", {}, extra)
    assert seen == {"prompt": "P", "auxiliary": {"judge": "engine"}}
    score_group(catch_all, "catch_all", ["r"], "t", {}, extra)
    assert seen["kwargs"] == ["auxiliary", "prompt", "task"]


@pytest.mark.parametrize(
    "result", [ZeroDivisionError("boom"), math.nan, "1.0", {"a": None}, True, np.True_, np.float32("inf")],
    ids=["raises", "nan", "string", "none-component", "bool", "numpy-bool", "numpy-inf"],
)
def test_failing_reward_marks_the_group(result, caplog: pytest.LogCaptureFixture) -> None:
    def bad(response, truth):
        if isinstance(result, Exception):
            raise result
        return result

    with caplog.at_level(logging.WARNING, logger="rfthpc.rewards.scoring"):
        outcome = score_group(bad, "bad", ["a", "b", "c"], "1", {}, {})
    assert outcome.rewards == [0.0, 0.0, 0.0]
    assert outcome.error is not None and outcome.error.startswith("bad: ")
    assert "reward function failed" in caplog.text


def test_reward_config_mistakes_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"reward_fn_args \['scale'\] are not parameters"):
        score_group(format_reward, "format_reward", ["x"], None, {"scale": 2}, {})
    with pytest.raises(ConfigError, match="must accept the keyword arguments response and truth"):
        score_group(lambda text: 1.0, "lam", ["x"], None, {}, {})


def test_plain_numbers_are_compared_without_math_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two plain decimal numbers (GSM8K's answers) need no symbolic parser; anything else still uses it."""
    import math_verify

    calls: list[str] = []
    real_parse = math_verify.parse
    monkeypatch.setattr(math_verify, "parse", lambda text, **kw: calls.append(text) or real_parse(text, **kw))
    assert answers_equal("42", "42.0") and answers_equal(" -3 ", "-3") and not answers_equal("7", "8")
    assert calls == []
    assert answers_equal("1/2", "0.5") and calls
