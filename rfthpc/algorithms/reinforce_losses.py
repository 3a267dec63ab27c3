"""REINFORCE-style policy losses, l = -w A log pi with a token mask or a penalty on log pi - log mu.

rec: Trinity-RFT's REC family ("group-relative REINFORCE is secretly an off-policy algorithm"),
trained on the behaviour policy's tokens; dro: veRL's Direct Reward Optimization loss, which
compares with the policy at the start of the trainer step.
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.aggregation import aggregate_loss, masked_mean
from rfthpc.algorithms.declare import declare
from rfthpc.algorithms.loss_args import clip_bounds, non_negative, one_of, positive, spelled_either
from rfthpc.algorithms.policy_loss import PolicyLossInputs, _metrics, _need, _ratio_terms, masked_inputs
from rfthpc.errors import ConfigError

REC_CLIP_MODES = ("none", "one-side", "gspo-one-side", "two-side", "ring")
REC_WEIGHTS = ("none", "importance_sampling", "truncated_importance_sampling", "gspo_importance_sampling", "advantage")
REC_REGULARIZERS = ("none", "k2", "forward-kl")


@declare("policy_loss", "rec")
def rec(
    inputs: PolicyLossInputs,
    *,
    clip_mode: str = "none",
    weight: str = "none",
    regularizer: str = "none",
    regularizer_coef: float = 0.0,
    temp: float = 1.0,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_range_low_prime: float | None = None,
    clip_range_high_prime: float | None = None,
    epsilon_low: float | None = None,
    epsilon_high: float | None = None,
    epsilon_low_prime: float | None = None,
    epsilon_high_prime: float | None = None,
    fix_opd_advantage: bool = False,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """REC (Trinity-RFT's `rec`): l = -w A log pi * M + R, rho = pi / mu (mu the behaviour policy), s_b =
    exp((1/n_b) sum_t log rho_bt) the response's geometric-mean ratio, eps = clip_range_low/_high.

    M (clip_mode): none: 1; two-side: [1 - eps_low <= rho <= 1 + eps_high]; one-side: [rho <= 1 + eps_high]
    where A >= 0 and [rho >= 1 - eps_low] where A <= 0; gspo-one-side: one-side on s_b; ring: two-side,
    or rho <= 1 - eps'_low where A >= 0, or rho >= 1 + eps'_high where A <= 0 (eps' = the _prime
    arguments: far-off tokens are kept, only the band just outside the trust region is cut).
    w (weight, detached): none: 1; importance_sampling: rho; truncated_importance_sampling:
    clip(rho, 1 - eps'_low, 1 + eps'_high); gspo_importance_sampling: s_b; advantage: exp(A / temp).
    fix_opd_advantage (Trinity 0.6, for on-policy distillation run off-policy) adds sg(log mu - log pi)
    to w A. R (regularizer, on every token): none; k2: coef (log pi - log mu)^2;
    forward-kl: -coef log pi. Argument names follow this project, and Trinity's are accepted too:
    epsilon_low/_high[_prime] = clip_range_low/_high[_prime]. Defaults are Trinity's default_args
    (eps 0.2, eps'_low 0.6, eps'_high 2). Trinity aggregates by token mean (seq-mean-token-mean for
    gspo-one-side); here loss_agg_mode applies. Metrics: pg_clipfrac = share of tokens with M = 0, ppo_kl.
    """
    one_of("rec", "clip_mode", clip_mode, REC_CLIP_MODES)
    one_of("rec", "weight", weight, REC_WEIGHTS)
    one_of("rec", "regularizer", regularizer, REC_REGULARIZERS)
    low, high = clip_bounds(
        "rec", clip_range, spelled_either("rec", "clip_range_low", clip_range_low, "epsilon_low", epsilon_low, None),
        spelled_either("rec", "clip_range_high", clip_range_high, "epsilon_high", epsilon_high, None),
        clip_range, clip_range)
    low_prime = spelled_either("rec", "clip_range_low_prime", clip_range_low_prime, "epsilon_low_prime",
                               epsilon_low_prime, 0.6)
    high_prime = spelled_either("rec", "clip_range_high_prime", clip_range_high_prime, "epsilon_high_prime",
                                epsilon_high_prime, 2.0)
    positive("rec", "clip_range_low_prime", low_prime)
    positive("rec", "clip_range_high_prime", high_prime)
    if low > 1 or low_prime > 1:
        raise ConfigError(
            f"algorithm.policy_loss_fn_args: rec's clip_range_low ({low}) and clip_range_low_prime "
            f"({low_prime}) must be <= 1 (the ratio bound 1 - eps is then >= 0)."
        )
    non_negative("rec", "regularizer_coef", regularizer_coef)
    positive("rec", "temp", temp)
    inputs = masked_inputs(inputs)
    log_ratio, ratio, adv = _ratio_terms(inputs, "rec")
    old = _need(inputs.old_log_prob, "behaviour log-probabilities (old_log_prob)", "rec")
    mask = inputs.response_mask
    rho = ratio.detach()
    seq_ratio = torch.exp(masked_mean(log_ratio.detach(), mask, dim=-1)).unsqueeze(-1).expand_as(rho)
    up, down = adv >= 0, adv <= 0
    inside_band = (rho >= 1 - low) & (rho <= 1 + high)
    if clip_mode == "two-side":
        keep = inside_band
    elif clip_mode == "one-side":
        keep = (up & (rho <= 1 + high)) | (down & (rho >= 1 - low))
    elif clip_mode == "gspo-one-side":
        keep = (up & (seq_ratio <= 1 + high)) | (down & (seq_ratio >= 1 - low))
    elif clip_mode == "ring":
        keep = inside_band | (up & (rho <= 1 - low_prime)) | (down & (rho >= 1 + high_prime))
    else:
        keep = torch.ones_like(mask, dtype=torch.bool)
    if weight == "importance_sampling":
        weighted = adv * rho
    elif weight == "truncated_importance_sampling":
        weighted = adv * torch.clamp(rho, 1 - low_prime, 1 + high_prime)
    elif weight == "gspo_importance_sampling":
        weighted = adv * seq_ratio
    elif weight == "advantage":
        weighted = adv * torch.exp(adv / temp)
    else:
        weighted = adv
    if fix_opd_advantage:
        # Trinity's distillation advantage is log teacher - log mu; the target is log teacher - log pi.
        weighted = weighted + old - inputs.log_prob.detach()
    token_loss = torch.where(keep, -weighted * inputs.log_prob, torch.zeros_like(rho))
    if regularizer == "k2":
        token_loss = token_loss + regularizer_coef * (inputs.log_prob - old) ** 2
    elif regularizer == "forward-kl":
        token_loss = token_loss - regularizer_coef * inputs.log_prob
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    return loss, _metrics(loss, log_ratio, mask, ~keep)


@declare("policy_loss", "dro", old_log_prob="proximal")
def dro(
    inputs: PolicyLossInputs, *, beta: float | None = None, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Direct Reward Optimization loss, as veRL's `dro` (beta = veRL's policy_loss.dro_beta):

        l = -(A log pi - (beta / 2) (log pi - log mu)^2)
    beta has no default (veRL requires it too). Metrics: ppo_kl; pg_clipfrac / pg_clipfrac_lower 0.
    """
    if beta is None or not beta > 0:
        raise ConfigError(
            f"algorithm.policy_loss_fn_args.beta: 'dro' needs a positive beta (veRL's policy_loss.dro_beta), got {beta}."
        )
    inputs = masked_inputs(inputs)
    old = _need(inputs.old_log_prob, "old log-probabilities (old_log_prob)", "dro")
    adv = _need(inputs.advantages, "advantages", "dro")
    # The penalty is quadratic, not exponential: the raw difference is used, unclamped, as veRL does.
    log_ratio = inputs.log_prob - old
    mask = inputs.response_mask
    loss = aggregate_loss(-(adv * inputs.log_prob - 0.5 * beta * log_ratio**2), mask, loss_agg_mode)
    return loss, _metrics(loss, log_ratio, mask)
