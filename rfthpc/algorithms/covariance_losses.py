"""Clip-Cov and KL-Cov (arXiv:2505.22617, "The Entropy Mechanism of RL for Reasoning LMs").

Both single out the few tokens whose covariance between log-probability and advantage,
    cov_bt = (A_bt - mean A) (log pi_bt - mean log pi)      (means over the response tokens of the batch),
is largest — the tokens that drive the entropy collapse — and restrain only those: Clip-Cov takes
them out of the gradient, KL-Cov adds a penalty |log pi - log mu| on them. As in veRL, the tokens
are chosen among the tokens of the (micro-)batch the loss sees, and mu is the policy at the start of
the trainer step ("proximal").
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.aggregation import aggregate_loss, masked_count, masked_mean
from rfthpc.algorithms.declare import declare
from rfthpc.algorithms.loss_args import clip_bounds, non_negative, positive
from rfthpc.algorithms.policy_loss import PolicyLossInputs, _fraction, _metrics, _ratio_terms, masked_inputs


def _covariance(inputs: PolicyLossInputs, adv: torch.Tensor) -> torch.Tensor:
    """cov_bt above (detached); only its values at response tokens are meaningful."""
    mask = inputs.response_mask
    log_prob = inputs.log_prob.detach()
    return (adv - masked_mean(adv, mask)) * (log_prob - masked_mean(log_prob, mask))


@declare("policy_loss", "clip_cov", old_log_prob="proximal")
def clip_cov(
    inputs: PolicyLossInputs,
    *,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip-Cov, as veRL's `clip_cov`: PPO's clipped loss (no dual clip) where k tokens carry no loss,

        l_bt = 0                                                     (b, t) in K
        l_bt = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))   otherwise
    K: k = max(1, floor(clip_cov_ratio * N)) tokens drawn at random (N response tokens) among those
    PPO does not clip already whose cov lies in (clip_cov_lb, clip_cov_ub); all of them if fewer.
    Defaults are veRL's. Metrics: pg_clipfrac = share of tokens in K (veRL's meaning),
    pg_clipfrac_lower 0, ppo_kl. Ratios are clamped at e^+-20 like every ratio here (veRL's
    clip_cov does not clamp).
    """
    low, high = clip_bounds("clip_cov", clip_range, clip_range_low, clip_range_high, clip_range, clip_range)
    positive("clip_cov", "clip_cov_ratio", clip_cov_ratio)
    inputs = masked_inputs(inputs)
    log_ratio, ratio, adv = _ratio_terms(inputs, "clip_cov")
    mask = inputs.response_mask
    valid = mask.bool()
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    cov = _covariance(inputs, adv)
    candidates = valid & ~(clipped > unclipped) & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    where = torch.nonzero(candidates)
    k = max(int(clip_cov_ratio * masked_count(mask).item()), 1)
    chosen = where[torch.randperm(len(where), device=where.device)[:k]]
    in_k = torch.zeros_like(valid)
    in_k[chosen[:, 0], chosen[:, 1]] = True
    token_loss = torch.where(in_k, torch.zeros_like(ratio), torch.maximum(unclipped, clipped))
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    return loss, _metrics(loss, log_ratio, mask, in_k)


@declare("policy_loss", "kl_cov", old_log_prob="proximal")
def kl_cov(
    inputs: PolicyLossInputs,
    *,
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 0.1,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL-Cov, as veRL's `kl_cov`: the unclipped surrogate with a KL penalty on the top-k tokens,

        l_bt = -A rho + ppo_kl_coef |log rho|    (b, t) among the k tokens of largest cov
        l_bt = -A rho                            otherwise
    k = max(1, floor(kl_cov_ratio * N)), N response tokens. Defaults are veRL's (kl_cov_ratio 2e-4,
    ppo_kl_coef 0.1). Metrics as veRL reports them: actor/ppo_kl = mean |log rho| (not
    log mu - log pi); pg_clipfrac / pg_clipfrac_lower 0; actor/kl_cov_frac = share of penalised
    tokens. Ratios are clamped at e^+-20 (veRL's kl_cov does not clamp).
    """
    positive("kl_cov", "kl_cov_ratio", kl_cov_ratio)
    non_negative("kl_cov", "ppo_kl_coef", ppo_kl_coef)
    inputs = masked_inputs(inputs)
    log_ratio, ratio, adv = _ratio_terms(inputs, "kl_cov")
    mask = inputs.response_mask
    valid = mask.bool()
    cov = _covariance(inputs, adv)
    n_valid = int(valid.sum().item())
    penalised = torch.zeros_like(valid)
    if n_valid:
        k = max(1, int(n_valid * kl_cov_ratio))
        flat_valid = torch.nonzero(valid.reshape(-1)).squeeze(-1)
        top = flat_valid[torch.topk(cov.reshape(-1)[flat_valid], min(k, n_valid)).indices]
        penalised.view(-1)[top] = True
    token_loss = -adv * ratio + torch.where(penalised, ppo_kl_coef * log_ratio.abs(), torch.zeros_like(ratio))
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    metrics = _metrics(loss, log_ratio, mask)
    metrics["actor/ppo_kl"] = masked_mean(log_ratio.detach().abs(), mask).item()
    metrics["actor/kl_cov_frac"] = _fraction(penalised, mask)
    return loss, metrics
