"""The KL coefficients, from `algorithm.kl_penalty_fn_args` and `algorithm.kl_loss_fn_args`.

Plain Python (no torch): `rfthpc config validate` checks the arguments with the same functions the
trainer builds its coefficients with, so a mistake is reported before anything is queued.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rfthpc.errors import ConfigError
from rfthpc.registry import accepted_keywords

KL_LOSS_ARGS = ("kl_coef",)
"""What `algorithm.kl_loss_fn_args` may hold."""


def kl_loss_coef(args: Mapping[str, Any]) -> float:
    """The KL loss coefficient `algorithm.kl_loss_fn_args` gives (veRL's default 0.001)."""
    unknown = sorted(set(args) - set(KL_LOSS_ARGS))
    if unknown:
        raise ConfigError(f"algorithm.kl_loss_fn_args: {', '.join(map(repr, unknown))} not accepted; "
                          f"accepted: {', '.join(KL_LOSS_ARGS)} (the coefficient of the KL loss term)")
    return float(args.get("kl_coef", 0.001))


class FixedKLController:
    """A constant KL coefficient beta = kl_coef."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """A fixed coefficient ignores the observed KL."""


class AdaptiveKLController:
    """The adaptive KL coefficient of Ziegler et al. 2019 (arXiv:1909.08593), as in veRL.

    After each batch:
        e     = clip(current_kl / target_kl - 1, -0.2, 0.2)
        beta <- beta * (1 + e * n_steps / horizon)
    """

    def __init__(self, kl_coef: float, target_kl: float, horizon: float) -> None:
        self.value = kl_coef
        self.target_kl = target_kl
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move beta towards the value that keeps the KL near target_kl, after n_steps samples."""
        error = min(max(current_kl / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


KLController = FixedKLController | AdaptiveKLController


def make_kl_controller(
    *, kl_coef: float = 0.001, adaptive: bool = False, target_kl: float | None = None, horizon: float | None = None
) -> KLController:
    """The controller `algorithm.kl_penalty_fn_args` describes (Trinity-RFT's keys and defaults)."""
    if not adaptive:
        return FixedKLController(kl_coef)
    if target_kl is None or horizon is None or target_kl <= 0 or horizon <= 0:
        raise ConfigError(
            "algorithm.kl_penalty_fn_args: adaptive KL needs target_kl > 0 and horizon > 0 "
            f"(got target_kl={target_kl}, horizon={horizon}); set both or set adaptive: false."
        )
    return AdaptiveKLController(kl_coef, target_kl, horizon)


def kl_controller(args: Mapping[str, Any]) -> KLController:
    """`make_kl_controller` from `algorithm.kl_penalty_fn_args`, with unknown keys reported by name."""
    accepted = sorted(accepted_keywords(make_kl_controller) or ())
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise ConfigError(f"algorithm.kl_penalty_fn_args: {', '.join(map(repr, unknown))} not accepted; "
                          f"accepted: {', '.join(accepted)}")
    return make_kl_controller(**args)
