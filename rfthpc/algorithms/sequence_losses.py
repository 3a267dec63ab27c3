"""Policy losses whose importance ratio is a response's, not a token's: GSPO and GMPO (`geo_mean`).

Both compare with the policy at the start of the trainer step (veRL's old_log_prob: "proximal").
Notation as in `policy_loss`: pi current policy, mu old policy, A advantage, n_b the response's
token count, sg stop-gradient.
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.aggregation import aggregate_loss, masked_count, masked_mean, masked_sum
from rfthpc.algorithms.declare import declare
from rfthpc.algorithms.loss_args import clip_bounds
from rfthpc.algorithms.policy_loss import (
    _LOG_RATIO_LIMIT,
    PolicyLossInputs,
    _metrics,
    _need,
    masked_inputs,
)

_GSPO_LOG_RATIO_MAX = 10.0
"""veRL caps log s_{b,t} at 10 before exp (a response-level ratio beyond e^10 is clipped anyway)."""


@declare("policy_loss", "gspo", old_log_prob="proximal")
def gspo(
    inputs: PolicyLossInputs,
    *,
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Group Sequence Policy Optimization (arXiv:2507.18071), GSPO-token form, as veRL's `gspo`:

        log s_b    = (1/n_b) sum_t (log pi_bt - log mu_bt)          (the response's ratio, geometric mean)
        s_bt       = exp(min(sg(log s_b) + log pi_bt - sg(log pi_bt), 10))
        l_bt       = max(-A_bt s_bt, -A_bt clip(s_bt, 1 - eps_low, 1 + eps_high))
    s_bt equals s_b but carries each token's own gradient. eps_low / eps_high default to the paper's
    3e-4 / 4e-4 (Trinity-RFT's defaults too) unless clip_range or the side's own argument is given;
    veRL instead takes the actor's clip_ratio (0.2 unless set). The paper aggregates with
    seq-mean-token-mean. Metrics: pg_clipfrac (tokens whose clipped term wins), pg_clipfrac_lower 0
    (as veRL), ppo_kl (token mean of log mu - log pi), actor/ppo_kl_seq (mean over responses of
    -log s_b, Trinity's metric).
    """
    low, high = clip_bounds("gspo", clip_range, clip_range_low, clip_range_high, 3e-4, 4e-4)
    inputs = masked_inputs(inputs)
    old = _need(inputs.old_log_prob, "old log-probabilities (old_log_prob)", "gspo")
    adv = _need(inputs.advantages, "advantages", "gspo")
    mask = inputs.response_mask
    log_ratio = inputs.log_prob - old
    seq_log_ratio = masked_mean(log_ratio, mask, dim=-1).detach()
    log_s = seq_log_ratio.unsqueeze(-1) + inputs.log_prob - inputs.log_prob.detach()
    s = torch.exp(torch.clamp(log_s, max=_GSPO_LOG_RATIO_MAX))
    unclipped = -adv * s
    clipped = -adv * torch.clamp(s, 1.0 - low, 1.0 + high)
    loss = aggregate_loss(torch.maximum(unclipped, clipped), mask, loss_agg_mode)
    metrics = _metrics(loss, log_ratio, mask, clipped > unclipped)
    metrics["actor/ppo_kl_seq"] = masked_mean(-seq_log_ratio, masked_count(mask, dim=-1) > 0).item()
    return loss, metrics


@declare("policy_loss", "geo_mean", "gmpo", old_log_prob="proximal", rollout_is_weights=True)
def geo_mean(
    inputs: PolicyLossInputs,
    *,
    clip_range: float = 0.4,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Geometric-Mean Policy Optimization (GMPO, arXiv:2507.20673), as veRL's `geo_mean`:

        r_bt  = log pi_bt - log mu_bt, clipped in log space on the side the advantage pushes:
        r'_bt = sgn(A) min(sgn(A) r_bt, sgn(A) clip(r_bt, -eps_low, eps_high))
        A_b   = (1/n_b) sum_t A_bt,   l_b = -A_b exp((1/n_b) sum_t r'_bt)
    i.e. the geometric mean of the token ratios replaces PPO's arithmetic mean. eps defaults to the
    paper's 0.4 (clip range (e^-0.4, e^0.4)); veRL takes the actor's clip_ratio (0.2 unless set).
    Advantages should be per response (GRPO's), as veRL requires. With rollout importance weights
    (algorithm.rollout_correction) a response is weighted once, as veRL does, by the geometric mean of
    its tokens' weights: l_b <- l_b exp((1/n_b) sum_t log(w_bt + 1e-10)).

    Every token of a response carries l_b and the loss is aggregated by loss_agg_mode, so the
    trainer's micro-batch weighting stays exact. Deliberate differences from veRL, which ignores
    loss_agg_mode and takes the plain mean of l_b over all rows: with seq-mean-token-mean the loss
    is that mean over the non-empty responses (veRL's also counts fully padded rows, as 0), and
    token log-ratios are clamped to +-20 first like every ratio here (veRL does not clamp; only a
    ratio beyond e^20 sees the difference). Metrics: pg_clipfrac / pg_clipfrac_lower = tokens with
    A > 0 / A < 0 whose log-ratio lies outside [-eps_low, eps_high]; ppo_kl; actor/gmpo_seq_ratio_mean (mean of the clipped exp(mean r'_bt)).
    """
    low, high = clip_bounds("geo_mean", clip_range, clip_range_low, clip_range_high, clip_range, clip_range)
    inputs = masked_inputs(inputs)
    old = _need(inputs.old_log_prob, "old log-probabilities (old_log_prob)", "geo_mean")
    adv = _need(inputs.advantages, "advantages", "geo_mean")
    mask = inputs.response_mask
    log_ratio = torch.clamp(inputs.log_prob - old, -_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    sign = torch.sign(adv)
    bounded = torch.clamp(log_ratio, -low, high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * bounded)
    count = masked_count(mask, dim=-1).clamp(min=1).to(log_ratio.dtype)
    seq_ratio = torch.exp(masked_sum(pessimistic, mask, dim=-1) / count)
    seq_adv = masked_sum(adv, mask, dim=-1) / count
    seq_loss = -seq_adv * seq_ratio
    if inputs.rollout_is_weights is not None:
        log_weights = torch.log(inputs.rollout_is_weights.detach().to(log_ratio.dtype) + 1e-10)
        seq_loss = seq_loss * torch.exp(masked_sum(log_weights, mask, dim=-1) / count)
    token_loss = seq_loss.unsqueeze(-1).expand_as(log_ratio)
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    outside = log_ratio != bounded
    metrics = _metrics(loss, log_ratio, mask, outside & (adv > 0), outside & (adv < 0))
    metrics["actor/gmpo_seq_ratio_mean"] = masked_mean(seq_ratio.detach(), masked_count(mask, dim=-1) > 0).item()
    return loss, metrics
