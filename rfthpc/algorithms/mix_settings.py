"""How a mix stage (`rfthpc.algorithms.mixing`) weighs and counts its expert rows: plain Python, so that a config is
checked without importing torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rfthpc.errors import ConfigError

_KEY = "algorithm.policy_loss_fn_args"
RATIO_KEY = "algorithm.sample_strategy_args.expert_data_ratio"


def chord_mu(step: int, warmup: int, decay: int, peak: float, valley: float) -> float:
    """CHORD's mu after `step` trainer steps (Trinity-RFT's schedule): peak * step / warmup during the warm-up,
    then a cosine from peak down to valley over `decay` steps, valley after."""
    if step < warmup:
        return step / warmup * peak
    if step >= warmup + decay:
        return valley
    return valley + (peak - valley) * 0.5 * (1 + math.cos(math.pi * (step - warmup) / decay))


EXPERT_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
"""How the expert term may be averaged (`sft_loss_agg_mode`): the modes that average over tokens or rows, so
that the term is a mean over the mini-batch's expert rows however they are split into micro-batches."""


def expert_agg_mode(sft_loss_agg_mode: str | None, use_token_level_loss_in_sft: bool) -> str:
    """The expert term's aggregation: `sft_loss_agg_mode` (Trinity-RFT's newer argument) if given, else Trinity's
    older switch: a mean over tokens (true) or over rows of each row's token mean (false)."""
    if sft_loss_agg_mode is not None:
        if sft_loss_agg_mode not in EXPERT_AGG_MODES:
            raise ConfigError(f"{_KEY}.sft_loss_agg_mode: {sft_loss_agg_mode!r} is not one of "
                              f"{', '.join(EXPERT_AGG_MODES)} (the expert term is a mean over the step's expert rows)")
        return sft_loss_agg_mode
    return "token-mean" if use_token_level_loss_in_sft else "seq-mean-token-mean"


def mix_args(*, mu: float, sft_loss_agg_mode: str | None, use_token_level_loss_in_sft: bool, **_: Any) -> None:
    """mix: a weight in [0, 1]; a known aggregation of the expert term."""
    if not 0 <= mu <= 1:
        raise ConfigError(f"{_KEY}.mu must lie in [0, 1] (the expert term's weight), got {mu}.")
    expert_agg_mode(sft_loss_agg_mode, use_token_level_loss_in_sft)


def mix_chord_args(*, mu_warmup_steps: int, mu_decay_steps: int, mu_peak: float, mu_valley: float,
                   sft_loss_agg_mode: str | None, use_token_level_loss_in_sft: bool, **_: Any) -> None:
    """mix_chord: weights in [0, 1], schedule lengths >= 0; a known aggregation of the expert term."""
    expert_agg_mode(sft_loss_agg_mode, use_token_level_loss_in_sft)
    for name, value in (("mu_peak", mu_peak), ("mu_valley", mu_valley)):
        if not 0 <= value <= 1:
            raise ConfigError(f"{_KEY}.{name} must lie in [0, 1] (the expert term's weight), got {value}.")
    for name, steps in (("mu_warmup_steps", mu_warmup_steps), ("mu_decay_steps", mu_decay_steps)):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ConfigError(f"{_KEY}.{name} must be a whole number >= 0, got {steps!r}.")


@dataclass(frozen=True)
class ExpertMix:
    """The expert term of a mix stage, from its `mix` / `mix_chord` policy loss's arguments."""

    mu_warmup_steps: int
    mu_decay_steps: int
    mu_peak: float
    mu_valley: float
    phi: bool
    """Each expert token weighted by p (1 - p) (CHORD's `enable_phi_function`)."""
    agg_mode: str
    """How the expert term is averaged (EXPERT_AGG_MODES): over the expert tokens, or over the expert rows."""

    @classmethod
    def of(cls, policy_loss: str, args: dict[str, Any]) -> ExpertMix:
        """The expert term of policy loss `policy_loss` ("mix": a fixed `mu`; "mix_chord": a schedule), from its
        arguments `args` with the function's defaults filled in (`AlgorithmRegistry.defaults`)."""
        agg_mode = expert_agg_mode(args["sft_loss_agg_mode"], args["use_token_level_loss_in_sft"])
        if policy_loss == "mix":
            return cls(0, 0, float(args["mu"]), float(args["mu"]), False, agg_mode)
        return cls(int(args["mu_warmup_steps"]), int(args["mu_decay_steps"]), float(args["mu_peak"]),
                   float(args["mu_valley"]), bool(args["enable_phi_function"]), agg_mode)

    def mu(self, steps_before: int) -> float:
        """The expert term's weight at a step with `steps_before` trainer steps before it."""
        return chord_mu(steps_before, self.mu_warmup_steps, self.mu_decay_steps, self.mu_peak, self.mu_valley)


def expert_rows(train_batch_size: int, ratio: float) -> int:
    """Expert rows of a mix step of `train_batch_size` experiences (Trinity-RFT's split: ceil(ratio x size), the
    rest rollouts)."""
    return math.ceil(ratio * train_batch_size)


def expert_split_problems(train_batch_size: int, ratio: Any, repeat_times: int) -> list[str]:
    """What is wrong with a mix stage's split of its `train_batch_size` experiences: a ratio outside [0, 1), or
    rollouts that are not whole groups of `repeat_times`."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
        return [f"{RATIO_KEY} must lie in [0, 1) (the share of each step's experiences that are expert rows), "
                f"got {ratio!r}"]
    rollouts = train_batch_size - expert_rows(train_batch_size, ratio)
    if rollouts < repeat_times or rollouts % repeat_times:
        return [f"{RATIO_KEY} {ratio}: of buffer.train_batch_size {train_batch_size}, "
                f"{expert_rows(train_batch_size, ratio)} are expert rows and {rollouts} rollouts, which are not whole "
                f"groups of algorithm.repeat_times {repeat_times}; choose a ratio or a batch size that leaves a "
                "multiple of repeat_times"]
    return []
