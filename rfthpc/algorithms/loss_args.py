"""Argument checks shared by the policy losses (plain Python: no tensors)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rfthpc.errors import ConfigError


def clip_bounds(
    loss: str, clip_range: float | None, clip_range_low: float | None, clip_range_high: float | None,
    default_low: float, default_high: float,
) -> tuple[float, float]:
    """(eps_low, eps_high): each side's own argument, else clip_range, else the loss's default.

    Both must be > 0; ConfigError naming the argument otherwise.
    """
    low = next(v for v in (clip_range_low, clip_range, default_low) if v is not None)
    high = next(v for v in (clip_range_high, clip_range, default_high) if v is not None)
    for name, value in (("clip_range_low", low), ("clip_range_high", high)):
        positive(loss, name, value)
    return float(low), float(high)


def spelled_either(loss: str, name: str, value: Any, trinity_name: str, trinity_value: Any, default: Any) -> Any:
    """An argument Trinity-RFT spells differently: the value given under either name, else `default`.

    ConfigError when both names are given different values.
    """
    if value is not None and trinity_value is not None and value != trinity_value:
        raise ConfigError(
            f"algorithm.policy_loss_fn_args: {name}={value} and {trinity_name}={trinity_value} name the same "
            f"argument of {loss!r} ({trinity_name} is Trinity-RFT's spelling); keep one."
        )
    return next((v for v in (value, trinity_value) if v is not None), default)


def positive(loss: str, name: str, value: float) -> None:
    """ConfigError unless value > 0."""
    if not value > 0:
        raise ConfigError(f"algorithm.policy_loss_fn_args.{name} must be > 0 for {loss!r}, got {value}; set a positive value.")


def non_negative(loss: str, name: str, value: float) -> None:
    """ConfigError unless value >= 0 (and not NaN)."""
    if not value >= 0:
        raise ConfigError(f"algorithm.policy_loss_fn_args.{name} must be >= 0 for {loss!r}, got {value}.")


def one_of(loss: str, name: str, value: str, known: Iterable[str]) -> None:
    """ConfigError unless value is one of `known`."""
    choices = tuple(known)
    if value not in choices:
        raise ConfigError(
            f"algorithm.policy_loss_fn_args.{name}: {value!r} is not a {loss!r} choice; use one of {', '.join(choices)}."
        )
