"""Trinity-RFT's rlcr_reward on hand-written responses: the tag chain it reads, its five weighted
components (the Brier score of the stated confidence), and a group scored through its config name."""

from __future__ import annotations

import math

import pytest

from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.rlcr_reward import DEFAULT_WEIGHTS, stated_confidence, terminal_chain
from rfthpc.rewards.scoring import score_group

RLCR = REWARDS.get("rlcr_reward")


def chain(answer: str = "42", confidence: str = "0.8", *, before: str = "", gap: str = "") -> str:
    """A response ending with the four-part tag chain, `gap` between the parts."""
    return (f"{before}<think>6 * 7</think>{gap}<answer>{answer}</answer>{gap}<analysis>7 sixes are 42</analysis>{gap}"
            f"<confidence>{confidence}</confidence>")


def test_a_right_answer_gets_the_five_weighted_components() -> None:
    scores = RLCR(response=chain(confidence="0.8"), truth="42")
    assert scores == pytest.approx({"format": 0.5, "accuracy": 0.5, "brier": 0.5 * (1 - 0.2**2),
                                    "mean_confidence": 0.8e-5, "confidence_one_or_zero": 0.0})
    assert sum(scores.values()) == pytest.approx(0.5 + 0.5 + 0.48 + 0.8e-5)


def test_a_wrong_answer_is_rewarded_for_low_confidence() -> None:
    """Brier: 1 - (0 - q)^2, so a wrong answer stated with q = 0.2 earns more than with q = 0.9."""
    low, high = RLCR(response=chain("41", "0.2"), truth="42"), RLCR(response=chain("41", "0.9"), truth="42")
    assert (low["accuracy"], low["brier"], high["brier"]) == pytest.approx((0.0, 0.5 * 0.96, 0.5 * 0.19))


def test_answers_are_compared_with_the_reference_answer() -> None:
    """A MATH-style truth counts by its box; an equivalent form of the answer counts as right."""
    assert RLCR(response=chain("\\frac{84}{2}", "1"), truth="so it is $\\boxed{42}$")["accuracy"] == 0.5
    assert RLCR(response=chain("42", "1"), truth="He has 6 * 7 = 42 apples.\n#### 42")["accuracy"] == 0.5


def test_draft_tags_before_the_chain_are_allowed_and_the_chain_wins() -> None:
    draft = "draft: <think>a</think><answer>41</answer><analysis>b</analysis><confidence>0.1</confidence> then "
    assert terminal_chain(chain(before=draft, gap=" \n\t") + " \r\n") == ("42", 0.8)
    scores = RLCR(response=chain(before=draft), truth="42")
    assert (scores["accuracy"], scores["mean_confidence"]) == pytest.approx((0.5, 0.8e-5))


@pytest.mark.parametrize("response", [
    "6 * 7</think><answer>42</answer><analysis>x</analysis><confidence>0.8</confidence>",  # no <think>
    "<think>x</think><analysis>x</analysis><answer>42</answer><confidence>0.8</confidence>",  # out of order
    chain()[:-1],  # the last tag cut short
    chain() + " and more",  # text after the chain
    chain(gap=" so "),  # text between its parts
    "<think>x<answer>42</answer></think>" + chain(),  # nested earlier
    "<think>x</answer><answer>42</think><analysis>x</analysis><confidence>0.8</confidence>",  # crossed
    "<answer>left open " + chain(),
    chain(answer="42<analysis>x</analysis>"),  # nested in the chain
    chain().replace("think>", "Think>"),  # tags are case-sensitive
])
def test_a_malformed_chain_earns_no_format_accuracy_or_brier(response: str) -> None:
    assert terminal_chain(response) is None
    scores = RLCR(response=response, truth="42")
    assert scores["format"] == scores["accuracy"] == scores["brier"] == 0.0


@pytest.mark.parametrize("confidence", ["", "sure", "NaN", "inf", "-inf", "-0.01", "1.01"])
def test_a_confidence_that_is_no_probability_earns_nothing(confidence: str) -> None:
    assert RLCR(response=chain(confidence=confidence), truth="42") == dict.fromkeys(DEFAULT_WEIGHTS, 0.0)


def test_the_monitoring_terms_read_the_last_confidence_of_a_malformed_chain() -> None:
    no_think = "<answer>42</answer><analysis>x</analysis><confidence>1</confidence>"
    assert RLCR(response=no_think, truth="42") == pytest.approx(
        {"format": 0.0, "accuracy": 0.0, "brier": 0.0, "mean_confidence": 1e-5, "confidence_one_or_zero": 1e-5})
    assert stated_confidence(chain() + "<confidence>0.1") is None  # the last opening tag is never closed
    assert stated_confidence("<confidence>0.3<answer>4</answer></confidence>") is None


@pytest.mark.parametrize(("confidence", "extreme"), [("0", True), ("0.009", True), ("0.01", False), ("0.99", False),
                                                      ("0.991", True), ("1", True)])
def test_all_or_nothing_confidence_lies_strictly_outside_one_percent(confidence: str, extreme: bool) -> None:
    assert RLCR(response=chain(confidence=confidence), truth="42")["confidence_one_or_zero"] == (1e-5 if extreme else 0)


def test_weights_are_matched_by_name() -> None:
    weights = {"confidence_one_or_zero": 5, "mean_confidence": 4, "brier": 3, "accuracy": 2, "format": 1}
    assert RLCR(response=chain(confidence="1"), truth="42", weights=weights) == {
        "format": 1.0, "accuracy": 2.0, "brier": 3.0, "mean_confidence": 4.0, "confidence_one_or_zero": 5.0}


@pytest.mark.parametrize(("weights", "error", "match"), [
    ({"format": 1, "accuracy": 1, "brier": 1, "mean_confidence": 1}, ValueError, r"missing \['confidence_one_or_zero'\]"),
    ({**DEFAULT_WEIGHTS, "length": 1}, ValueError, r"unknown \['length'\]"),
    ({**DEFAULT_WEIGHTS, "format": "0.5"}, ValueError, "not finite numbers"),
    ({**DEFAULT_WEIGHTS, "format": True}, ValueError, "not finite numbers"),
    ({**DEFAULT_WEIGHTS, "brier": math.nan}, ValueError, "not finite numbers"),
    ([0.5] * 5, TypeError, "must map the components"),
])
def test_bad_weights_are_refused(weights, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RLCR(response=chain(), truth="42", weights=weights)


def test_a_group_is_scored_through_the_config_name() -> None:
    """The example's reward_fn_args (its weights, Trinity's defaults) reach the function; the reward is the sum."""
    responses = [chain("42", "0.9"), chain("41", "0.9"), "42"]
    outcome = score_group(RLCR, "rlcr_reward", responses, "42", {"weights": DEFAULT_WEIGHTS}, {})
    assert outcome.error is None
    assert outcome.rewards == pytest.approx([0.5 + 0.5 + 0.5 * 0.99 + 0.9e-5, 0.5 + 0.5 * 0.19 + 0.9e-5, 0.0])
    assert outcome.components[0]["brier"] == pytest.approx(0.495)
    with pytest.raises(ValueError, match="response_key"):
        RLCR(response=chain(), truth=None)
