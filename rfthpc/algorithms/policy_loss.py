"""Policy losses (`algorithm.policy_loss_fn`, arguments from `algorithm.policy_loss_fn_args`).

Every loss takes a `PolicyLossInputs` plus keyword-only arguments (always including
`loss_agg_mode`) and returns `(loss, metrics)`: a scalar to minimise and floats under veRL's metric
names. Losses that use the behaviour policy report `actor/pg_loss`, `actor/pg_clipfrac`,
`actor/pg_clipfrac_lower` and `actor/ppo_kl`, plus their own `actor/<variant>_*` metrics.

Notation: pi = current policy (`log_prob`, differentiable), mu = policy that generated the tokens
(`old_log_prob`, from the experience store), rho = pi / mu per token, A = advantage, sg = stop-gradient.
rho is computed as exp(clamp(log pi - log mu, -20, 20)) so a stale sample cannot overflow it.

The off-policy variants vanilla/tis/topr/cispo/kimi15 follow ROLL's `pg_variant` definitions and
defaults (argument names follow this project's Trinity-style config; see each docstring).
Note: veRL's policy loss "vanilla" is PPO's clipped loss; here `vanilla` is ROLL's (= `pg`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from rfthpc.algorithms.aggregation import aggregate_loss, masked_count, masked_mean, masked_sum
from rfthpc.algorithms.declare import declare
from rfthpc.errors import ConfigError

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]

_LOG_RATIO_LIMIT = 20.0


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss may read, for a batch of B responses padded to T tokens."""

    log_prob: torch.Tensor
    """(B, T) log pi(a_t | s_t) under the policy being trained (carries the gradient)."""
    response_mask: torch.Tensor
    """(B, T) 1 for tokens that enter the loss."""
    old_log_prob: torch.Tensor | None = None
    """(B, T) log mu(a_t | s_t) of the policy that generated the tokens (stored behaviour logprobs)."""
    advantages: torch.Tensor | None = None
    """(B, T) advantage per token."""
    rewards: torch.Tensor | None = None
    """(B,) sequence reward; TOPR splits positive and negative samples on it."""
    behaviour_log_prob: torch.Tensor | None = None
    """(B, T) log mu of the behaviour policy next to a proximal `old_log_prob`; given to losses that
    declare behaviour_log_prob=True or rollout_is_weights=True (decoupled PPO)."""
    rollout_is_weights: torch.Tensor | None = None
    """(B, T) rollout-correction importance weights (no gradient); given to losses that declare
    rollout_is_weights=True, which apply them themselves (None: rollout_is is off)."""
    ref_log_prob: torch.Tensor | None = None
    """(B, T) log pi_ref of the frozen reference model; given to losses that declare preference_pairs=True."""
    pair_sign: torch.Tensor | None = None
    """(B,) +1 for the chosen response of its preference pair, -1 for the rejected one (preference_pairs)."""
    partner_log_ratio: torch.Tensor | None = None
    """(B,) sum over its pair's other response of log pi - log pi_ref, pi the policy at the start of the
    step (no gradient; preference_pairs)."""


def masked_inputs(inputs: PolicyLossInputs) -> PolicyLossInputs:
    """`inputs` with log_prob, old_log_prob and advantages set to 0 outside the response mask.

    An inf or NaN at a padded position then reaches neither the loss nor the gradient (torch.where
    sends no gradient to the positions it does not select, and everything computed from a 0 is finite).
    """
    keep = inputs.response_mask.bool()

    def clean(value: torch.Tensor) -> torch.Tensor:
        return torch.where(keep, value, torch.zeros_like(value))

    return replace(
        inputs,
        log_prob=clean(inputs.log_prob),
        old_log_prob=None if inputs.old_log_prob is None else clean(inputs.old_log_prob),
        advantages=None if inputs.advantages is None else clean(inputs.advantages),
    )


def _need(value: torch.Tensor | None, what: str, loss: str) -> torch.Tensor:
    if value is None:
        raise ConfigError(
            f"algorithm.policy_loss_fn: {loss!r} needs {what}, which this batch does not carry; "
            "choose a policy_loss_fn that fits the data (e.g. 'sft' for SFT data)."
        )
    return value


def _ratio_terms(inputs: PolicyLossInputs, loss: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log rho, rho, A) for a loss that uses the behaviour policy."""
    old = _need(inputs.old_log_prob, "behaviour log-probabilities (old_log_prob)", loss)
    adv = _need(inputs.advantages, "advantages", loss)
    log_ratio = torch.clamp(inputs.log_prob - old, -_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    return log_ratio, torch.exp(log_ratio), adv


def _fraction(flags: torch.Tensor | None, mask: torch.Tensor) -> float:
    """Share of response tokens where `flags` is true (0 when there are no flags)."""
    return 0.0 if flags is None else masked_mean(flags.to(torch.get_default_dtype()), mask).item()


def _metrics(
    loss: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    clipped: torch.Tensor | None = None,
    clipped_lower: torch.Tensor | None = None,
) -> dict[str, float]:
    """The four veRL metrics; ppo_kl = masked mean of log mu - log pi."""
    return {
        "actor/pg_loss": loss.detach().item(),
        "actor/pg_clipfrac": _fraction(clipped, mask),
        "actor/pg_clipfrac_lower": _fraction(clipped_lower, mask),
        "actor/ppo_kl": masked_mean(-log_ratio.detach(), mask).item(),
    }


@declare("policy_loss", "ppo", old_log_prob="proximal")
def ppo(
    inputs: PolicyLossInputs,
    *,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    enable_sequence_masking: bool = False,
    delta_sequence_masking: float = 0.1,
    fallback_to_policy_gradient: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with dual clip (veRL's), per token:

        l   = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))
        l  <- min(l, -A c)   where A < 0        (dual clip, c = clip_ratio_c > 1)
    eps_low / eps_high default to clip_range. pg_clipfrac: tokens where the clipped term wins;
    pg_clipfrac_lower: tokens (A < 0) where the dual clip bound wins.

    Trinity-RFT's options: `fallback_to_policy_gradient` takes rho = pi / sg(pi) (1 in value, the policy
    gradient's gradient), ignoring the old policy; `enable_sequence_masking` (DeepSeek-V3.2's) zeroes
    the loss of the tokens with A < 0 in responses whose mean token KL to the old policy,
    mean_t(log mu - log pi), exceeds `delta_sequence_masking` (they stay in the aggregation's count, as
    in Trinity). Metrics then: actor/seq_mask/masked_tokens (their share of the tokens) and
    actor/seq_mask/mean_sequence_kl (the mean over the rows).
    """
    if clip_ratio_c <= 1.0:
        raise ConfigError(
            f"algorithm.policy_loss_fn_args.clip_ratio_c must be > 1 (dual-clip PPO), got {clip_ratio_c}."
        )
    low = clip_range if clip_range_low is None else clip_range_low
    high = clip_range if clip_range_high is None else clip_range_high
    inputs = masked_inputs(inputs)
    mask = inputs.response_mask
    log_ratio, ratio, adv = _ratio_terms(inputs, "ppo")
    if fallback_to_policy_gradient:
        log_ratio = inputs.log_prob - inputs.log_prob.detach()
        ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    surrogate = torch.maximum(unclipped, clipped)
    dual_bound = -adv * clip_ratio_c
    dual = torch.minimum(surrogate, dual_bound)
    token_loss = torch.where(adv < 0, dual, surrogate)
    extra: dict[str, float] = {}
    if enable_sequence_masking:
        sequence_kl = masked_sum(-log_ratio.detach(), mask, dim=-1) / masked_count(mask, dim=-1).clamp(min=1)
        dropped = (adv < 0) & (sequence_kl > delta_sequence_masking).unsqueeze(-1) & mask.bool()
        token_loss = torch.where(dropped, torch.zeros_like(token_loss), token_loss)
        extra = {"actor/seq_mask/masked_tokens": _fraction(dropped, mask),
                 "actor/seq_mask/mean_sequence_kl": sequence_kl.mean().item()}
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    return loss, {**_metrics(loss, log_ratio, mask, clipped > unclipped, (surrogate > dual_bound) & (adv < 0)),
                  **extra}


@declare("policy_loss", "pg", "vanilla", "gpg")
def pg(inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """Plain policy gradient, no importance ratio (ROLL's `vanilla`, veRL's `gpg`): l = -A log pi.

    veRL's gpg reports no metrics; here ppo_kl is measured against the behaviour policy.
    """
    inputs = masked_inputs(inputs)
    log_ratio, _, adv = _ratio_terms(inputs, "pg")
    loss = aggregate_loss(-adv * inputs.log_prob, inputs.response_mask, loss_agg_mode)
    return loss, _metrics(loss, log_ratio, inputs.response_mask)


@declare("policy_loss", "importance_sampling")
def importance_sampling(
    inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Trinity-RFT's importance_sampling loss (its on-policy distillation's): l = -A exp(log pi - log mu),
    unclipped, the log-ratio to the behaviour policy mu (the sampling log-probabilities) clamped to
    +-20. Metrics: pg_loss, ppo_kl, actor/ratio_mean (Trinity's ratio/mean).
    """
    inputs = masked_inputs(inputs)
    log_ratio, ratio, adv = _ratio_terms(inputs, "importance_sampling")
    loss = aggregate_loss(-adv * ratio, inputs.response_mask, loss_agg_mode)
    metrics = _metrics(loss, log_ratio, inputs.response_mask)
    metrics["actor/ratio_mean"] = masked_mean(ratio.detach(), inputs.response_mask).item()
    return loss, metrics


@declare("policy_loss", "sft")
def sft(inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """Supervised fine-tuning, negative log-likelihood: l = -log pi. Metric `actor/sft_loss`."""
    loss = aggregate_loss(-inputs.log_prob, inputs.response_mask, loss_agg_mode)
    return loss, {"actor/sft_loss": loss.detach().item()}


@declare("policy_loss", "opmd")
def opmd(
    inputs: PolicyLossInputs, *, tau: float = 1.0, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Online policy mirror descent (Trinity-RFT): L = agg(-A log pi) / (1 + tau).

    The 1 / (1 + tau) factor is OPMD's regularisation towards the current policy; use the same tau
    as the `opmd` advantage.
    """
    log_ratio, _, adv = _ratio_terms(inputs, "opmd")
    loss = aggregate_loss(-adv * inputs.log_prob, inputs.response_mask, loss_agg_mode) / (1.0 + tau)
    return loss, _metrics(loss, log_ratio, inputs.response_mask)


@declare("policy_loss", "tis")
def tis(
    inputs: PolicyLossInputs,
    *,
    lower_bound: float = 0.0,
    upper_bound: float = 1.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance sampling (ROLL `tis`): l = -sg(clip(rho, lower_bound, upper_bound)) A log pi.

    ROLL's `tis_lower_bound` / `tis_upper_bound` (defaults 0 and 1). Metrics: actor/tis_lower_clipfrac,
    actor/tis_upper_clipfrac, actor/tis_total_clipfrac, actor/tis_clipped_ratio_mean; pg_clipfrac is
    the total and pg_clipfrac_lower the lower truncation fraction.
    """
    if lower_bound > upper_bound:
        raise ConfigError(
            f"algorithm.policy_loss_fn_args: tis lower_bound {lower_bound} exceeds upper_bound {upper_bound}."
        )
    log_ratio, ratio, adv = _ratio_terms(inputs, "tis")
    weight = torch.clamp(ratio, lower_bound, upper_bound).detach()
    mask = inputs.response_mask
    loss = aggregate_loss(-weight * adv * inputs.log_prob, mask, loss_agg_mode)
    below, above = ratio < lower_bound, ratio > upper_bound
    metrics = _metrics(loss, log_ratio, mask, below | above, below)
    metrics["actor/tis_lower_clipfrac"] = metrics["actor/pg_clipfrac_lower"]
    metrics["actor/tis_upper_clipfrac"] = _fraction(above, mask)
    metrics["actor/tis_total_clipfrac"] = metrics["actor/pg_clipfrac"]
    metrics["actor/tis_clipped_ratio_mean"] = masked_mean(weight, mask).item()
    return loss, metrics


@declare("policy_loss", "topr")
def topr(
    inputs: PolicyLossInputs,
    *,
    positive_weight: float = 1.0,
    negative_weight: float = 1.0,
    advantage_threshold: float | None = 0.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Tapered off-policy REINFORCE (TOPR, arXiv:2503.14286; Trinity-RFT `topr`, ROLL `topr`).

    Positive samples get an SFT-like update, the others a truncated-IS update:
        l = -w+ A log pi                          (positive)
        l = -w- sg(clip(rho, 0, 1)) A log pi      (negative)
    Which samples are positive: each token whose advantage exceeds `advantage_threshold` (Trinity-RFT's
    split and default, 0.0; the rewards are not read), or with `advantage_threshold: null` the responses
    with reward R > 0 (the paper's and ROLL's split, which ROLL imports select). The two agree where the
    advantage is the reward (the `topr` preset's `reinforce`). w+ / w- are ROLL's `topr_positive_weight` /
    `topr_negative_weight` (Trinity has none: 1.0). Metrics: counts of positive and negative responses
    (reward split), the mean taper alpha (1 or clip(rho, 0, 1), Trinity's `avg_alpha`) and the fraction
    of negative tokens whose ratio was truncated (also reported as pg_clipfrac).
    """
    log_ratio, ratio, adv = _ratio_terms(inputs, "topr")
    mask = inputs.response_mask
    if advantage_threshold is None:
        rewards = _need(inputs.rewards, "sequence rewards", "topr")
        positive = (rewards > 0).unsqueeze(-1).expand_as(adv)
    else:
        positive = adv > advantage_threshold
    alpha = torch.where(positive, torch.ones_like(ratio), torch.clamp(ratio, 0.0, 1.0)).detach()
    weight = torch.where(positive, positive_weight, negative_weight * alpha)
    loss = aggregate_loss(-weight * adv * inputs.log_prob, mask, loss_agg_mode)
    truncated = ~positive & (ratio > 1.0)
    metrics = _metrics(loss, log_ratio, mask, truncated)
    if advantage_threshold is None:
        metrics["actor/topr_positive_samples"] = float((rewards > 0).sum().item())
        metrics["actor/topr_negative_samples"] = float((rewards <= 0).sum().item())
    metrics["actor/topr_avg_alpha"] = masked_mean(alpha, mask).item()
    metrics["actor/topr_negative_total_clipfrac"] = metrics["actor/pg_clipfrac"]
    return loss, metrics


@declare("policy_loss", "cispo")
def cispo(
    inputs: PolicyLossInputs,
    *,
    clip_range_low: float = 0.1,
    clip_range_high: float = 0.1,
    use_unified_mask: bool = False,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped IS-weight policy optimisation (CISPO, arXiv:2506.13585; ROLL `cispo`):

        l = -sg(clip(rho, 1 - eps_low, 1 + eps_high)) A log pi  * M
    M = 1, or with use_unified_mask M = 0 where (A > 0 and rho > 1 + eps_high) or
    (A < 0 and rho < 1 - eps_low) — the tokens PPO's clip would silence. eps_low / eps_high are ROLL's
    `cispo_epsilon_low` / `cispo_epsilon_high` (defaults 0.1, no mask). Trinity-RFT's cispo loss is this with
    1.0 / 0.28 and the mask always on (its mask ranges are its clip ranges), which the `cispo` preset sets.
    Metrics: actor/cispo_{lower,upper,total}_clipfrac and, with the mask, actor/cispo_kept_tokens; pg_clipfrac
    is the total and pg_clipfrac_lower 0, as veRL reports them.

    Without the mask this is veRL's `cispo` on the same inputs. Deliberate differences: mu is the
    behaviour policy (as in ROLL and Trinity-RFT, which train on the explorer's log-probabilities),
    where veRL compares with the recomputed policy at the start of the step; the default clip
    ranges are ROLL's 0.1, where veRL takes the actor's clip_ratio (0.2).
    """
    inputs = masked_inputs(inputs)
    log_ratio, ratio, adv = _ratio_terms(inputs, "cispo")
    low, high = 1.0 - clip_range_low, 1.0 + clip_range_high
    weight = torch.clamp(ratio, low, high).detach()
    below, above = ratio < low, ratio > high
    keep = torch.ones_like(ratio, dtype=torch.bool)
    if use_unified_mask:
        keep = ~((adv > 0) & above | (adv < 0) & below)
    mask = inputs.response_mask
    token_loss = torch.where(keep, -weight * adv * inputs.log_prob, torch.zeros_like(ratio))
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    # pg_clipfrac_lower stays 0 as in veRL (CISPO has no dual clip); cispo_lower_clipfrac has the share.
    metrics = _metrics(loss, log_ratio, mask, below | above)
    metrics["actor/cispo_lower_clipfrac"] = _fraction(below, mask)
    metrics["actor/cispo_upper_clipfrac"] = _fraction(above, mask)
    metrics["actor/cispo_total_clipfrac"] = metrics["actor/pg_clipfrac"]
    if use_unified_mask:
        metrics["actor/cispo_kept_tokens"] = _fraction(keep, mask)
    return loss, metrics


@declare("policy_loss", "kimi15")
def kimi15(
    inputs: PolicyLossInputs, *, tau: float = 0.1, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Kimi k1.5 policy loss (arXiv:2501.12599 eq. 3; ROLL `kimi15`, `kimi15_tau`):

        l = -A log pi + (tau / 2) (log pi - log mu)^2
    Metrics: actor/kimi15_policy_grad_magnitude = mean |A log rho|, actor/kimi15_kl_reg_magnitude =
    mean (tau / 2) (log rho)^2 over response tokens.
    """
    log_ratio, _, adv = _ratio_terms(inputs, "kimi15")
    mask = inputs.response_mask
    old = _need(inputs.old_log_prob, "behaviour log-probabilities (old_log_prob)", "kimi15")
    token_loss = -adv * inputs.log_prob + 0.5 * tau * (inputs.log_prob - old) ** 2
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    metrics = _metrics(loss, log_ratio, mask)
    metrics["actor/kimi15_policy_grad_magnitude"] = masked_mean((adv * log_ratio).abs().detach(), mask).item()
    metrics["actor/kimi15_kl_reg_magnitude"] = masked_mean(0.5 * tau * log_ratio.detach() ** 2, mask).item()
    return loss, metrics
