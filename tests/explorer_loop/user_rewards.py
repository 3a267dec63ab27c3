"""Reward functions given to the explorer as user code (`path/to/user_rewards.py:function`)."""

from __future__ import annotations

import itertools


def explode(response: str, truth: str) -> float:
    """1.0, except for tasks whose truth is `boom`: there it raises, like a buggy user function."""
    if truth.strip() == "boom":
        raise RuntimeError("reward server unreachable")
    return 1.0


def exact_match(response: str, truth: str) -> dict[str, float]:
    """{"accuracy": 1} if the response is exactly the reference text."""
    return {"accuracy": 1.0 if response == truth else 0.0}


_calls = itertools.count()


def constant_unless_vary(response: str, truth: str) -> dict[str, float]:
    """{"accuracy": 0.5} for tasks whose truth is `constant` (a group without contrast); else a value
    never returned before (every response of the group scores differently)."""
    return {"accuracy": 0.5 if truth.strip() == "constant" else float(next(_calls))}


def response_length(response: str, truth: str) -> float:
    """The response's length in characters: different responses (mostly) score differently."""
    return float(len(response))
