"""Reward functions given to the explorer as user code (`path/to/user_rewards.py:function`)."""

from __future__ import annotations


def explode(response: str, truth: str) -> float:
    """1.0, except for tasks whose truth is `boom`: there it raises, like a buggy user function."""
    if truth.strip() == "boom":
        raise RuntimeError("reward server unreachable")
    return 1.0


def exact_match(response: str, truth: str) -> dict[str, float]:
    """{"accuracy": 1} if the response is exactly the reference text."""
    return {"accuracy": 1.0 if response == truth else 0.0}
