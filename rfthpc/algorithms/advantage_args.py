"""Argument checks of the advantage functions (plain Python: no tensors).

Each function that has one names it in its `@declare(..., checked_by=...)`: it calls the check with its
arguments, and `rfthpc config validate` calls it with the config's (the defaults filled in), so a bad
value is reported before anything is queued."""

from __future__ import annotations

import math
from typing import Any

from rfthpc.errors import ConfigError

_KEY = "algorithm.advantage_fn_args"


def opmd_args(*, opmd_baseline: str, tau: float, **_: Any) -> None:
    """opmd: a known baseline; tau > 0 (the log-average-exp's temperature)."""
    if opmd_baseline not in ("mean", "logavgexp"):
        raise ConfigError(f"{_KEY}.opmd_baseline: unknown baseline {opmd_baseline!r}; known: mean, logavgexp.")
    if not tau > 0:
        raise ConfigError(f"{_KEY}.tau must be > 0, got {tau}.")


def roll_normalisation_args(*, norm_mean_type: str | None, norm_std_type: str | None, reward_clip: float | None,
                            advantage_clip: float | None, **_: Any) -> None:
    """ROLL's reward normalisation and clips (lite_ppo, step_reinforce, roll_gigpo): known levels, positive clips."""
    for key, level in (("norm_mean_type", norm_mean_type), ("norm_std_type", norm_std_type)):
        if level not in ("group", "batch", None):
            raise ConfigError(f"{_KEY}.{key}: unknown level {level!r}; use group, batch or null (ROLL's running "
                              "statistics are not offered).")
    for key, bound in (("reward_clip", reward_clip), ("advantage_clip", advantage_clip)):
        if bound is not None and not bound > 0:
            raise ConfigError(f"{_KEY}.{key} must be > 0 (or null: no clip), got {bound!r}.")


def lite_ppo_args(*, norm_mean_type: str | None, norm_std_type: str | None, reward_clip: float | None,
                  advantage_clip: float | None, difficulty_mask: bool, difficulty_low_threshold: float,
                  difficulty_high_threshold: float, **_: Any) -> None:
    """lite_ppo: ROLL's normalisation levels; positive clips; a difficulty band that keeps some groups."""
    roll_normalisation_args(norm_mean_type=norm_mean_type, norm_std_type=norm_std_type, reward_clip=reward_clip,
                            advantage_clip=advantage_clip)
    if difficulty_mask and not difficulty_low_threshold < difficulty_high_threshold:
        raise ConfigError(f"{_KEY}.difficulty_low_threshold ({difficulty_low_threshold}) must be below "
                          f"difficulty_high_threshold ({difficulty_high_threshold}): no group would be trained.")


def raft_args(*, top_k: int, min_reward: float | None, **_: Any) -> None:
    """raft: at least one response kept per group."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"{_KEY}.top_k must be a whole number >= 1 (the responses kept per task), got {top_k!r}.")
    if min_reward is not None and (isinstance(min_reward, bool) or not isinstance(min_reward, (int, float))):
        raise ConfigError(f"{_KEY}.min_reward must be a number or null, got {min_reward!r}.")


def jsd_args(*, lambda_coef: float, kl_coef: float, temperature: float, chunk_size: int | None, **_: Any) -> None:
    """jsd: a mixture weight in [0, 1]; a positive temperature; a positive chunk size or none."""
    if not 0 <= lambda_coef <= 1:
        raise ConfigError(f"{_KEY}.lambda_coef must lie in [0, 1] (the teacher's weight in the mixture), "
                          f"got {lambda_coef}.")
    if not temperature > 0:
        raise ConfigError(f"{_KEY}.temperature must be > 0 (it divides the log-probabilities), got {temperature}.")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ConfigError(f"{_KEY}.chunk_size must be a whole number >= 1 or null, got {chunk_size!r}.")


def step_return_args(*, step_reward_gamma: float, norm_mean_type: str | None, norm_std_type: str | None,
                     reward_clip: float | None, advantage_clip: float | None, **_: Any) -> None:
    """step_reinforce, roll_gigpo: a discount in [0, 1]; ROLL's normalisation levels and clips."""
    roll_normalisation_args(norm_mean_type=norm_mean_type, norm_std_type=norm_std_type, reward_clip=reward_clip,
                            advantage_clip=advantage_clip)
    if isinstance(step_reward_gamma, bool) or not isinstance(step_reward_gamma, (int, float)) \
            or not 0 <= step_reward_gamma <= 1:
        raise ConfigError(f"{_KEY}.step_reward_gamma must lie in [0, 1] (the discount of later steps' rewards), "
                          f"got {step_reward_gamma!r}.")


def gigpo_args(*, omega: float, gamma: float, fnorm: str, epsilon: float, **_: Any) -> None:
    """gigpo (Trinity-RFT's): a known normalisation; a discount in [0, 1]; a finite weight; epsilon > 0."""
    if fnorm not in ("std", "none"):
        raise ConfigError(f"{_KEY}.fnorm: unknown normalisation {fnorm!r}; use std (divide by the set's std) or none.")
    for key, value in (("omega", omega), ("gamma", gamma), ("epsilon", epsilon)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{_KEY}.{key} must be a number, got {value!r}.")
    if not 0 <= gamma <= 1:
        raise ConfigError(f"{_KEY}.gamma must lie in [0, 1] (the discount of later steps' rewards), got {gamma!r}.")
    if not epsilon > 0:
        raise ConfigError(f"{_KEY}.epsilon must be > 0 (it keeps a flat set's division finite), got {epsilon!r}.")
