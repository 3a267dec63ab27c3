"""Policy losses that replace PPO's ratio clip with another trust region.

dppo_tv / dppo_kl (DPPO, arXiv:2602.04879): a token leaves the gradient when the probability moved
too far, measured by total variation or binary KL; sapo (arXiv:2511.20347): a smooth sigmoid gate
instead of the hard clip; m2po (arXiv:2510.01161): tokens are dropped until the second moment of
the log-ratios is small; sppo (Trinity-RFT's sPPO, arXiv:2108.05828): the log-ratio itself is the
surrogate, kept only inside a ratio band. Notation as in `policy_loss` (p = pi(a_t), q = mu(a_t)
the probabilities of the sampled token).
"""

from __future__ import annotations

import math

import torch

from rfthpc.algorithms.aggregation import aggregate_loss, masked_mean
from rfthpc.algorithms.declare import declare
from rfthpc.algorithms.loss_args import clip_bounds, positive
from rfthpc.algorithms.policy_loss import PolicyLossInputs, _fraction, _metrics, _need, _ratio_terms, masked_inputs
from rfthpc.errors import ConfigError

_BINARY_KL_EPS = 1e-8
"""Keeps log((1 - q) / (1 - p)) finite when p or q is 1 (veRL's constant)."""


def _dppo(
    inputs: PolicyLossInputs, loss: str, divergence: str, clip_range: float, clip_range_low: float | None,
    clip_range_high: float | None, clip_ratio_c: float, loss_agg_mode: str,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The DPPO loss with the trust region named by `divergence` ("tv" or "kl"); see dppo_tv."""
    low, high = clip_bounds(loss, clip_range, clip_range_low, clip_range_high, clip_range, clip_range)
    positive(loss, "clip_ratio_c", clip_ratio_c)
    inputs = masked_inputs(inputs)
    log_ratio, ratio, adv = _ratio_terms(inputs, loss)
    old = _need(inputs.old_log_prob, "old log-probabilities (old_log_prob)", loss)
    p = torch.exp(inputs.log_prob.detach())
    q = torch.exp(old)
    if divergence == "tv":
        inside_up, inside_down = p - q <= high, p - q >= -low
    else:
        binary_kl = q * (old - inputs.log_prob.detach()) + (1 - q) * torch.log(
            (1 - q + _BINARY_KL_EPS) / (1 - p + _BINARY_KL_EPS)
        )
        inside_up, inside_down = (binary_kl <= high) | (p <= q), (binary_kl <= low) | (p >= q)
    inside = torch.where(adv > 0, inside_up, inside_down)
    weight = torch.clamp(ratio, max=clip_ratio_c).detach()
    token_loss = torch.where(inside, -adv * weight * inputs.log_prob, torch.zeros_like(ratio))
    mask = inputs.response_mask
    value = aggregate_loss(token_loss, mask, loss_agg_mode)
    return value, _metrics(value, log_ratio, mask, ~inside, (ratio > clip_ratio_c) & inside)


@declare("policy_loss", "dppo_tv", old_log_prob="proximal")
def dppo_tv(
    inputs: PolicyLossInputs,
    *,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO with a binary total-variation trust region, as veRL's `dppo_tv`:

        l_bt = -A sg(min(rho, c)) log pi * M_bt
        M_bt = [p - q <= delta_high]   (A > 0),   [p - q >= -delta_low]   (A <= 0)
    delta_low / delta_high (clip_range_low / clip_range_high, default clip_range = 0.2) bound the
    change of the sampled token's probability, not the ratio; c = clip_ratio_c truncates the IS
    weight. c defaults to 3.0, what veRL 0.9.1 uses unless the actor's clip_ratio_c is set (its
    code falls back to 20, the large cap the paper recommends, only when the key is absent).
    Metrics: pg_clipfrac = share outside the trust region, pg_clipfrac_lower = share inside it
    whose weight was truncated (rho > c), ppo_kl.
    """
    return _dppo(inputs, "dppo_tv", "tv", clip_range, clip_range_low, clip_range_high, clip_ratio_c, loss_agg_mode)


@declare("policy_loss", "dppo_kl", old_log_prob="proximal")
def dppo_kl(
    inputs: PolicyLossInputs,
    *,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO with a binary-KL trust region, as veRL's `dppo_kl`: dppo_tv's loss with

        D    = q log(q / p) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8))
        M_bt = [D <= delta_high or p <= q]   (A > 0),   [D <= delta_low or p >= q]   (A <= 0)
    (a token only leaves when it moved far in the direction its advantage pushes). Arguments,
    defaults and metrics as dppo_tv.
    """
    return _dppo(inputs, "dppo_kl", "kl", clip_range, clip_range_low, clip_range_high, clip_ratio_c, loss_agg_mode)


@declare("policy_loss", "sapo", old_log_prob="proximal")
def sapo(
    inputs: PolicyLossInputs,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    loss_agg_mode: str = "seq-mean-token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Soft Adaptive Policy Optimization, as veRL's `sapo`: a sigmoid gate instead of a hard clip,

        l_bt = -A f(rho),   f(rho) = (4 / tau) sigmoid(tau (rho - 1)),   tau = tau_pos (A > 0) else tau_neg
    The gradient -A 4 sigma (1 - sigma) rho grad log pi equals PPO's at rho = 1 and fades smoothly
    as rho leaves 1, faster for negative advantages (tau_neg > tau_pos). Defaults are veRL's and
    Trinity-RFT's (1.0, 1.05).

    Deliberate difference: veRL 0.9.1 always aggregates SAPO with seq-mean-token-mean (the paper's),
    ignoring loss_agg_mode; here loss_agg_mode applies as for every loss (Trinity-RFT does the same),
    so set `algorithm.loss_agg_mode: seq-mean-token-mean` for veRL's numbers. Trinity-RFT's sapo
    differs in the gradient (it weights -A log pi by the detached gate, 2 / tau at rho = 1); this
    is veRL's and the paper's. Metrics: pg_clipfrac / pg_clipfrac_lower 0 (no clip, as veRL),
    ppo_kl, actor/sapo_gate_mean (mean f(rho)).
    """
    positive("sapo", "tau_pos", tau_pos)
    positive("sapo", "tau_neg", tau_neg)
    inputs = masked_inputs(inputs)
    log_ratio, ratio, adv = _ratio_terms(inputs, "sapo")
    tau = torch.where(adv > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    mask = inputs.response_mask
    loss = aggregate_loss(-gate * adv, mask, loss_agg_mode)
    metrics = _metrics(loss, log_ratio, mask)
    metrics["actor/sapo_gate_mean"] = masked_mean(gate.detach(), mask).item()
    return loss, metrics


@declare("policy_loss", "m2po")
def m2po(
    inputs: PolicyLossInputs,
    *,
    m2_threshold: float = 0.04,
    log_ratio_clip: float = 20.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Second-Moment Trust Policy Optimization (M2PO, arXiv:2510.01161; Trinity-RFT's `m2po`):

        l_bt = -A rho M_bt,   rho = pi / mu with mu the behaviour policy (the explorer's)
    M drops tokens from the set T where PPO's clip could act (A > 0 and rho > 1, or A < 0 and
    rho < 1): the ones of largest M2 = (log rho)^2, the fewest such that the mean M2 over the rest of
    T is at most m2_threshold (default 0.04, the paper's). Dropped tokens still count in the
    denominator (the paper normalises by all response tokens).

    rho's value is exp(clamp(log rho, -log_ratio_clip, log_ratio_clip)) (Trinity's argument, default
    20), but its gradient is not cut where the clamp acts: it is rho's value times the gradient of
    log pi, as in Trinity. M2 is measured on the unclamped log rho.

    The paper sorts the tokens of a whole optimiser mini-batch; here those of the (micro-)batch the
    loss sees, so with several micro-batches per update the mask is computed per micro-batch.
    Metrics: pg_clipfrac = share of dropped tokens, ppo_kl, actor/m2po_m2_before / _m2_after (mean
    M2 over T before / after dropping), actor/m2po_masked_fraction, actor/m2po_trust_region_fraction.
    """
    if not (math.isfinite(m2_threshold) and m2_threshold >= 0):
        raise ConfigError(
            f"algorithm.policy_loss_fn_args.m2_threshold must be a finite number >= 0 for 'm2po', got {m2_threshold}."
        )
    positive("m2po", "log_ratio_clip", log_ratio_clip)
    inputs = masked_inputs(inputs)
    old = _need(inputs.old_log_prob, "behaviour log-probabilities (old_log_prob)", "m2po")
    adv = _need(inputs.advantages, "advantages", "m2po")
    log_ratio = inputs.log_prob - old
    # The clamp bounds rho's value only (a stale token cannot overflow it); the straight-through term
    # keeps the gradient a hard clamp would zero.
    bounded = log_ratio + (torch.clamp(log_ratio, -log_ratio_clip, log_ratio_clip) - log_ratio).detach()
    ratio = torch.exp(bounded)
    mask = inputs.response_mask
    valid = mask.bool()
    m2 = log_ratio.detach() ** 2
    in_region = valid & (((adv > 0) & (log_ratio > 0)) | ((adv < 0) & (log_ratio < 0)))
    region_index = torch.nonzero(in_region.reshape(-1)).squeeze(-1)
    values = m2.reshape(-1)[region_index]
    dropped = torch.zeros_like(valid)
    if len(values) and values.mean().item() > m2_threshold:
        ordered, order = torch.sort(values, stable=True)
        running_mean = torch.cumsum(ordered, 0) / torch.arange(1, len(values) + 1, dtype=values.dtype, device=values.device)
        keep = int((running_mean <= m2_threshold).sum().item())
        dropped.view(-1)[region_index[order[keep:]]] = True
    token_loss = torch.where(dropped, torch.zeros_like(ratio), -adv * ratio)
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    metrics = _metrics(loss, bounded, mask, dropped)
    kept = in_region & ~dropped
    metrics["actor/m2po_m2_before"] = masked_mean(m2, in_region).item()
    metrics["actor/m2po_m2_after"] = masked_mean(m2, kept).item()
    metrics["actor/m2po_masked_fraction"] = metrics["actor/pg_clipfrac"]
    metrics["actor/m2po_trust_region_fraction"] = _fraction(in_region, mask)
    return loss, metrics


@declare("policy_loss", "sppo", old_log_prob="proximal")
def sppo(
    inputs: PolicyLossInputs, *, epsilon: float = 0.3, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """sPPO (Trinity-RFT's `sppo` loss): PPO's surrogate with log rho in place of rho, zero outside a
    band around 1 that is symmetric in log rho:

        l = -A (log pi - log mu) [1 / (1 + epsilon) <= sg(rho) <= 1 + epsilon]
    mu is the policy at the start of the trainer step (Trinity's recomputed old_logprob). Defaults
    are Trinity's (epsilon 0.3). Trinity averages over tokens; here loss_agg_mode applies (its
    default, token-mean, is Trinity's). Metrics: pg_clipfrac = share of tokens outside the band, ppo_kl.
    """
    positive("sppo", "epsilon", epsilon)
    inputs = masked_inputs(inputs)
    old = _need(inputs.old_log_prob, "old log-probabilities (old_log_prob)", "sppo")
    log_ratio, ratio, adv = _ratio_terms(inputs, "sppo")
    rho = ratio.detach()
    inside = (rho >= 1 / (1 + epsilon)) & (rho <= 1 + epsilon)
    # The raw difference, as Trinity's; rho's clamp serves only the band test.
    token_loss = torch.where(inside, -adv * (inputs.log_prob - old), torch.zeros_like(rho))
    mask = inputs.response_mask
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    return loss, _metrics(loss, log_ratio, mask, ~inside)
