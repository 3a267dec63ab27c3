"""Call a reward function on a group of responses, and survive one that raises.

A reward function is any callable `fn(response, truth, **args)` returning a float or a dict of
named float components (their sum is the reward, as in Trinity-RFT). It may also declare the
keyword parameters `prompt` (the prompt text), `task` (the Task) and `auxiliary` (the named
`AuxiliaryModel`s of `explorer.auxiliary_models`, for an LLM judge); only those it declares are passed.

If the function raises or returns something that is not a finite number, the whole group gets
reward 0 and `RewardOutcome.error` says why: the caller marks the group (`info["reward_error"]`),
logs it and goes on, so one bad reward function call does not stop an explorer.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rfthpc.errors import ConfigError

log = logging.getLogger(__name__)

OPTIONAL_INPUTS = ("prompt", "task", "auxiliary")


@dataclass
class RewardOutcome:
    """Rewards for one group, in response order."""

    rewards: list[float]
    components: list[dict[str, float]] = field(default_factory=list)
    error: str | None = None
    """Set when the reward function failed; then every reward is 0."""


def _accepted(fn: Callable[..., Any]) -> tuple[set[str], bool]:
    params = inspect.signature(fn).parameters.values()
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def takes(fn: Callable[..., Any], name: str) -> bool:
    """True if `fn` takes a keyword argument `name` (by name or through `**kwargs`)."""
    names, var_kw = _accepted(fn)
    return var_kw or name in names


def check_reward_args(fn: Callable[..., Any], name: str, args: Mapping[str, Any]) -> None:
    """Raise ConfigError if `fn` cannot take `reward_fn_args` (a config mistake, not a bad group)."""
    names, var_kw = _accepted(fn)
    missing = {"response", "truth"} - names
    if missing and not var_kw:
        raise ConfigError(
            f"reward function {name!r} must accept the keyword arguments response and truth "
            f"(missing: {', '.join(sorted(missing))})"
        )
    unknown = set(args) - names
    if unknown and not var_kw:
        raise ConfigError(
            f"reward_fn_args {sorted(unknown)} are not parameters of reward function {name!r}; "
            f"it takes {', '.join(sorted(names))}"
        )


def _as_components(value: Any) -> dict[str, float]:
    items = value.items() if isinstance(value, Mapping) else [("reward", value)]
    out = {}
    for key, v in items:
        # numbers.Real takes numpy scalars (np.float32, np.int64) too; a bool is no score.
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"component {key!r} is {v!r}, not a finite number")
        out[str(key)] = float(v)
    return out


def score_group(
    fn: Callable[..., Any],
    name: str,
    responses: Sequence[str],
    truth: str | None,
    args: Mapping[str, Any],
    extra: Mapping[str, Any],
) -> RewardOutcome:
    """Score every response of one group: reward_i = Σ components of fn(response_i, truth, **args).

    `extra` holds the optional inputs (`prompt`, `task`, `auxiliary`); each is passed only if
    `fn` declares it (or takes **kwargs).
    """
    check_reward_args(fn, name, args)
    names, var_kw = _accepted(fn)
    passed = {k: v for k, v in extra.items() if k in OPTIONAL_INPUTS and (var_kw or k in names)}
    components = []
    try:
        for response in responses:
            components.append(_as_components(fn(response=response, truth=truth, **passed, **args)))
    except Exception as e:  # noqa: BLE001 - any failure of user code marks the group, see module doc
        error = f"{name}: {type(e).__name__}: {e}"
        log.warning("reward function failed; group scored 0 and marked: %s", error, exc_info=True)
        return RewardOutcome([0.0] * len(responses), [{} for _ in responses], error)
    return RewardOutcome([sum(c.values()) for c in components], components)
