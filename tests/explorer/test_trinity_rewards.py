"""Trinity-RFT's reward functions by their names, on hand-written responses: countdown_reward,
math_boxed_reward's think-format option, math_dapo_reward and toolcall_reward."""

from __future__ import annotations

import json

import pytest

from rfthpc.rewards.countdown_reward import countdown_equation, evaluate_equation
from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.scoring import score_group

GAME = json.dumps({"target": 24, "numbers": [3, 4, 2]})
MATH_SOLUTION = "Add them: $20 + 22 = 42$, so the answer is $\\boxed{42}$."


@pytest.mark.parametrize(
    ("response", "score"),
    [
        ("<think>3*4=12, 12*2=24</think>\n<answer>3 * 4 * 2</answer>", 1.0),
        ("<answer> (4 - 2) * 3 * 4 </answer>", 0.1),  # 4 used twice
        ("<answer>(3 + 4) * 2</answer>", 0.1),  # every number once, but 14
        ("<answer>4 * (3 * 2)</answer>", 1.0),  # any order
        ("<answer>3 * 4 * 2 = 24</answer>", 0.1),  # `=` is not arithmetic (24 is an extra number too)
        ("<answer>3 * 4 * 2 / 0</answer>", 0.1),  # numbers wrong and division by zero
        ("<answer>abs(3) * 4 * 2</answer>", 0.1),  # no function calls
        ("<answer>3 * 4 * 2</answer> done", 1.0),  # on the last line, followed by text
        ("<answer>3 * 4 * 2</answer>\nI hope this helps.", 0.0),  # not on the last line: Trinity's rule
        ("<answer>1 + 1</answer><answer>3 * 4 * 2</answer>", 1.0),  # the last answer counts
        ("3 * 4 * 2 = 24", 0.0),  # no answer tags
    ],
)
def test_countdown_reward(response: str, score: float) -> None:
    assert REWARDS.get("countdown_reward")(response=response, truth=GAME) == {"score": score}


def test_countdown_equation_evaluation() -> None:
    assert countdown_equation("a\nsee <answer> 1 + 2 </answer>") == "1 + 2"
    assert evaluate_equation("(1 + 2) / 4") == 0.75
    assert evaluate_equation("2 ** 3 - -1") == 9.0
    assert evaluate_equation("9 ** 9 ** 9") is None  # bounded: Trinity's eval would not return
    assert evaluate_equation("1 / (2 - 2)") is None
    assert evaluate_equation("(1, 2)") is None and evaluate_equation("05 + 1") is None
    assert evaluate_equation("__import__('os')") is None


def test_countdown_reward_needs_its_json_truth() -> None:
    reward = REWARDS.get("countdown_reward")
    with pytest.raises(ValueError, match="not JSON"):
        reward(response="<answer>1</answer>", truth="24")
    with pytest.raises(ValueError, match="response_key"):
        reward(response="<answer>1</answer>", truth=None)


def test_math_boxed_reward_think_format_option() -> None:
    reward = REWARDS.get("math_boxed_reward")
    thought = "<think>20 + 22</think> so \\boxed{42}"
    assert reward(response=thought, truth="42") == {"accuracy": 1.0}
    assert reward(response=thought, truth="42", with_think=True) == {"accuracy": 1.0, "format_score": 0.0}
    for unformatted in ("\\boxed{42}", "</think><think> \\boxed{42}", "<think><think></think> \\boxed{42}"):
        assert reward(response=unformatted, truth="42", with_think=True, format_score_coef=0.5) == {
            "accuracy": 1.0, "format_score": -0.5}
    # A MATH solution as reference: its box is the answer.
    assert reward(response="\\boxed{42}", truth=MATH_SOLUTION) == {"accuracy": 1.0}
    assert reward(response="\\boxed{20}", truth=MATH_SOLUTION) == {"accuracy": 0.0}


@pytest.mark.parametrize(
    ("response", "accuracy"),
    [
        ("<think>maybe \\boxed{41}</think> The answer is \\boxed{42}.", 1.0),
        ("The answer is \\boxed{\\frac{84}{2}}", 1.0),
        ("<think>so \\boxed{42}</think> I am not sure.", -1.0),  # only the text after </think> counts
        ("The answer is \\boxed{41}.", -1.0),
        ("42", 1.0),  # the bare answer
        ("The answer is 42", -1.0),  # prose is not an answer
        ("", -1.0),
    ],
)
def test_math_dapo_reward(response: str, accuracy: float) -> None:
    reward = REWARDS.get("math_dapo_reward")
    assert reward(response=response, truth="42") == {"accuracy": accuracy}
    assert reward(response=response, truth="Tom has 42.\n#### 42") == {"accuracy": accuracy}


CALLS = [{"name": "weather", "arguments": {"city": "Oslo", "unit": "C"}}, {"name": "time", "arguments": {}}]


@pytest.mark.parametrize(
    ("response", "accuracy"),
    [
        (f"<think>two calls</think><tool_call>{json.dumps(CALLS)}</tool_call>", 1.0),
        # another order, other key order in the arguments
        ("<think>t</think>\n<tool_call>" + json.dumps(
            [{"name": "time", "arguments": {}}, {"arguments": {"unit": "C", "city": "Oslo"}, "name": "weather"}]
        ) + "</tool_call>", 1.0),
        (f"<tool_call>{json.dumps(CALLS)}</tool_call>", 0.0),  # no thinking
        (f"<tool_call>{json.dumps(CALLS)}</tool_call><think>t</think>", 0.0),  # thinking after the call
        (f"<think>a</think><think>b</think><tool_call>{json.dumps(CALLS)}</tool_call>", 0.0),
        (f"<think>t</think><tool_call>{json.dumps(CALLS[:1])}</tool_call>", 0.0),  # a call missing
        ("<think>t</think><tool_call>" + json.dumps(  # the right names, a wrong argument
            [{"name": "weather", "arguments": {"city": "Bergen", "unit": "C"}}, {"name": "time", "arguments": {}}]
        ) + "</tool_call>", 0.0),
        ("<think>t</think><tool_call>[{\"name\": \"time\"}]</tool_call>", 0.0),  # no arguments
        ("<think>t</think><tool_call>not json</tool_call>", 0.0),
        ("<think>t</think> I need no tool.", 0.0),
    ],
)
def test_toolcall_reward(response: str, accuracy: float) -> None:
    assert REWARDS.get("toolcall_reward")(response=response, truth=json.dumps(CALLS)) == {"accuracy": accuracy}


def test_toolcall_reward_single_call_and_no_call() -> None:
    reward = REWARDS.get("toolcall_reward")
    one = {"name": "time", "arguments": {"zone": "UTC"}}
    assert reward(response=f"<think>t</think><tool_call>{json.dumps(one)}</tool_call>",
                  truth=json.dumps([one])) == {"accuracy": 1.0}
    # The reference stored as JSON text of JSON text, as some datasets hold it.
    assert reward(response="<think>t</think><tool_call>[]</tool_call>",
                  truth=json.dumps(json.dumps([]))) == {"accuracy": 1.0}
    assert reward(response="<think>t</think><tool_call>[]</tool_call>", truth=json.dumps([one])) == {"accuracy": 0.0}


def test_dapo_rewards_score_a_group_with_negative_rewards() -> None:
    outcome = score_group(REWARDS.get("math_dapo_reward"), "math_dapo_reward",
                          ["\\boxed{42}", "\\boxed{7}"], "42", {}, {})
    assert outcome.error is None and outcome.rewards == [1.0, -1.0]
