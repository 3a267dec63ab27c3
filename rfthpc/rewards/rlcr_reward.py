"""Trinity-RFT's `rlcr_reward`: RLCR (reinforcement learning with calibration rewards,
arXiv:2507.16806) for math: a reward for the right answer and one for a well-calibrated confidence.

The response must end with Trinity's tag chain (its example's system prompt asks for it)

    <think>reasoning</think><answer>final answer</answer><analysis>check</analysis><confidence>q</confidence>

with nothing but whitespace between the four parts and after the last; q is the stated probability
that the answer is right, a finite number in [0, 1]. Each component is returned already multiplied
by its weight (`reward_fn_args.weights`, all five names, Trinity's defaults below); the reward is
their sum:

    format                  1 if the chain is well formed (below), else 0
    accuracy                1 if the answer equals the reference answer, else 0 (0 without the chain)
    brier                   1 - (accuracy - q)^2, the Brier score's complement (0 without the chain)
    mean_confidence         the stated confidence (else 0), a tiny term for monitoring
    confidence_one_or_zero  1 if it is below 0.01 or above 0.99, else 0, also tiny

The chain is well formed when the response's reserved tags (`<think>`, `<answer>`, `<analysis>`,
`<confidence>` and their closing tags, case-sensitive) are never nested, crossed or left open, its
last eight tags are the chain in order, and q parses. Complete tag pairs earlier in the response (a
draft) are allowed; the chain's values win. The two monitoring terms read the last closed
`<confidence>` pair even when the chain is malformed, unless a reserved tag sits inside it.

Answers are compared as rfthpc's other math rewards compare them (`answers_equal`: numerically or
with math-verify, as Trinity), against the reference answer of the truth (its `\\boxed{}`, else the
text after `####`, else the truth itself), where Trinity hands math-verify the whole truth. A task
without a ground truth is an error here (the group is marked), where Trinity scores the response
with 0 accuracy and 0 Brier.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping

from rfthpc.rewards.math_reward import answers_equal, reference_answer

DEFAULT_WEIGHTS = {"format": 0.5, "accuracy": 0.5, "brier": 0.5, "mean_confidence": 1e-5,
                   "confidence_one_or_zero": 1e-5}
"""Trinity-RFT's weight of each component (its example config spells out the same values)."""

_TAG = re.compile(r"</?(?:think|answer|analysis|confidence)>")
_CHAIN = ("<think>", "</think>", "<answer>", "</answer>", "<analysis>", "</analysis>", "<confidence>",
          "</confidence>")
_EXTREME = 0.01
"""A confidence below this, or above 1 minus this, counts as all-or-nothing."""


def _probability(text: str) -> float | None:
    """The number `text` holds if it is a finite probability in [0, 1], else None."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def stated_confidence(response: str) -> float | None:
    """The confidence in the response's last closed `<confidence>...</confidence>` pair, whether or not
    the tag chain around it is well formed; None if there is no such pair, a reserved tag sits inside
    it, or it holds no probability."""
    start, end = response.rfind("<confidence>"), response.rfind("</confidence>")
    if start < 0 or end < start:
        return None
    payload = response[start + len("<confidence>"):end]
    return None if _TAG.search(payload) else _probability(payload)


def terminal_chain(response: str) -> tuple[str, float] | None:
    """(the answer, the confidence) of a response that ends with a well-formed tag chain (module doc),
    else None."""
    tags = list(_TAG.finditer(response))
    open_name = None
    for tag in tags:
        name = tag.group(0).strip("</>")
        if tag.group(0).startswith("</"):
            if name != open_name:
                return None
            open_name = None
        elif open_name is not None:
            return None
        else:
            open_name = name
    if open_name is not None or len(tags) < len(_CHAIN):
        return None
    chain = tags[-len(_CHAIN):]
    if tuple(tag.group(0) for tag in chain) != _CHAIN:
        return None
    gaps = [response[chain[i].end():chain[i + 1].start()] for i in (1, 3, 5)] + [response[chain[-1].end():]]
    if any(gap.strip() for gap in gaps):
        return None
    confidence = _probability(response[chain[6].end():chain[7].start()])
    if confidence is None:
        return None
    return response[chain[2].end():chain[3].start()], confidence


def _checked_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """The weights by component: Trinity's defaults for None, else all five names with finite numbers."""
    if weights is None:
        return dict(DEFAULT_WEIGHTS)
    if not isinstance(weights, Mapping):
        raise TypeError(f"reward_fn_args.weights must map the components to numbers, got {weights!r}")
    missing, unknown = sorted(set(DEFAULT_WEIGHTS) - set(weights)), sorted(set(weights) - set(DEFAULT_WEIGHTS))
    if missing or unknown:
        raise ValueError(f"reward_fn_args.weights must name each of {', '.join(DEFAULT_WEIGHTS)}: missing "
                         f"{missing}, unknown {unknown}")
    bad = {name: value for name, value in weights.items()
           if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)}
    if bad:
        raise ValueError(f"reward_fn_args.weights: {bad} are not finite numbers")
    return {name: float(weights[name]) for name in DEFAULT_WEIGHTS}


def rlcr_reward(response: str, truth: str | None, *, weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """Trinity-RFT's `rlcr_reward` (module doc): the five weighted RLCR components of one response."""
    if truth is None:
        raise ValueError("the task has no ground truth: set format.response_key for this taskset")
    weight = _checked_weights(weights)
    stated = stated_confidence(response)
    chain = terminal_chain(response)
    accuracy = brier = 0.0
    if chain is not None:
        answer, confidence = chain
        accuracy = float(answers_equal(answer.strip(), reference_answer(truth)))
        brier = 1.0 - (accuracy - confidence) ** 2
    scores = {
        "format": float(chain is not None),
        "accuracy": accuracy,
        "brier": brier,
        "mean_confidence": stated or 0.0,
        "confidence_one_or_zero": float(stated is not None and (stated < _EXTREME or stated > 1 - _EXTREME)),
    }
    return {name: weight[name] * value for name, value in scores.items()}
