"""Rollout correction for stale and mismatched rollouts (`algorithm.rollout_correction`), and the two
policy losses built for them: veRL's bypass mode (REINFORCE with rollout IS weights) and AReaL's
decoupled PPO.

Notation: mu = the behaviour policy (log-probabilities the explorer stored with the tokens),
pi = the policy a loss compares with (the policy at the start of the trainer step, "proximal", for
a loss that clips against it; the current policy, without gradient, for a loss that compares with
mu directly), l = log pi - log mu per token, exp(l) computed as exp(clamp(l, -20, 20)).

Importance weights (`rollout_is`), as veRL 0.9.1's `compute_rollout_correction_weights`:
    token:     w_t = exp(l_t)
    sequence:  w_t = exp(clamp(sum_s l_s, -20, 20)) for every token t of the response
    TIS  (rollout_is_threshold u):       w <- min(w, u)
    IcePop (rollout_is_threshold lo_hi): w <- w if lo <= w <= hi else 0   (the token stays in the
                                          loss's denominator, as in veRL)
    batch_normalize: w <- w / mean(w)     (token level: over tokens; sequence level: over responses)
The weights carry no gradient; they multiply the per-token policy loss.

Rejection (`rollout_rs`), as veRL's `compute_rollout_rejection_mask`: tokens (token_* rules) or
whole responses (seq_* rules) whose divergence statistic is out of bounds leave the loss mask, and
with it the loss's denominators. See `rollout_settings.RejectionRule`.

Masked-out positions never reach a result, even when they hold inf or NaN; an empty batch gives
weights 0, nothing rejected and metrics 0.
"""

from __future__ import annotations

import math

import torch

from rfthpc.algorithms.aggregation import aggregate_loss, masked_count, masked_mean, masked_sum, token_weights
from rfthpc.algorithms.declare import declare
from rfthpc.algorithms.policy_loss import PolicyLossInputs, _metrics, _need, ppo
from rfthpc.algorithms.rollout_settings import RejectionRule, RolloutCorrection
from rfthpc.errors import ConfigError

SAFETY_BOUND = 20.0
"""|log-ratio| limit before exponentiating (e^20 ~ 4.9e8), as veRL's."""


def log_ratio(policy: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """l = log pi - log mu on response tokens, 0 elsewhere (so padding holding inf/NaN cannot leak)."""
    return torch.where(mask.bool(), policy.detach() - behaviour, torch.zeros_like(policy))


def _sequence_log_ratio(l: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) sum of l over each response's tokens, clamped to +-20."""
    return masked_sum(l, mask, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)


def importance_weights(l: torch.Tensor, mask: torch.Tensor, rc: RolloutCorrection) -> torch.Tensor:
    """(B, T) rollout IS weights (see the module docstring); 0 on masked positions; no gradient."""
    m = mask.bool()
    if rc.rollout_is == "token":
        raw = torch.exp(l.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    elif rc.rollout_is == "sequence":
        raw = torch.exp(_sequence_log_ratio(l, mask)).unsqueeze(-1).expand_as(l)
    else:
        raise ConfigError(f"algorithm.rollout_correction.rollout_is: {rc.rollout_is!r}; use 'token' or 'sequence'")
    if rc.is_lower is None:
        weights = raw.clamp(max=rc.is_upper)
    else:
        weights = torch.where((raw >= rc.is_lower) & (raw <= rc.is_upper), raw, torch.zeros_like(raw))
    weights = torch.where(m, weights, torch.zeros_like(weights)).detach()
    if rc.batch_normalize:
        if rc.rollout_is == "token":
            mean = masked_mean(weights, m)
        else:
            nonempty = masked_count(m, dim=-1) > 0
            mean = masked_mean(masked_mean(weights, m, dim=-1), nonempty)
        if mean > 1e-8:
            weights = weights / mean
    return weights


def _statistic(rule: RejectionRule, l: torch.Tensor) -> torch.Tensor:
    safe = l.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    if rule.stat == "k1":
        return -safe
    if rule.stat == "k2":
        return 0.5 * safe**2
    return torch.exp(safe) - 1.0 - safe


def rejection_mask(l: torch.Tensor, mask: torch.Tensor,
                   rules: tuple[RejectionRule, ...]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(keep, per-rule keep): (B, T) booleans, False for tokens some rule rejects (and for padding)."""
    m = mask.bool()
    keep = m.clone()
    per_rule: dict[str, torch.Tensor] = {}
    for rule in rules:
        stat = _statistic(rule, l)
        if rule.reduce == "sum":
            stat = masked_sum(stat, m, dim=-1).unsqueeze(-1)
        elif rule.reduce == "mean":
            stat = masked_mean(stat, m, dim=-1).unsqueeze(-1)
        elif rule.reduce == "max":
            # A response without tokens has no maximum; 0 keeps it (it has nothing to reject anyway).
            filled = torch.where(m, stat, torch.full_like(stat, -math.inf)).max(dim=-1).values
            stat = torch.where(torch.isinf(filled), torch.zeros_like(filled), filled).unsqueeze(-1)
        if rule.lower is not None:
            ok = (stat >= math.log(rule.lower)) & (stat <= math.log(rule.upper))
        else:
            ok = stat <= rule.upper
        ok = ok.expand_as(m) & m
        per_rule[rule.option] = ok
        keep &= ok
    return keep, per_rule


def _k3(l: torch.Tensor) -> torch.Tensor:
    safe = l.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return torch.exp(safe) - 1.0 - safe


def _share(flags: torch.Tensor, mask: torch.Tensor) -> float:
    return masked_mean(flags.to(torch.float64), mask).item()


def step_correction(
    policy: torch.Tensor,
    behaviour: torch.Tensor,
    mask: torch.Tensor,
    rc: RolloutCorrection,
    staleness: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, float]]:
    """A step's rollout correction from the policy at the step's start (`policy`) and the behaviour
    policy over the whole batch: (IS weights or None, keep mask or None, metrics).

    Metrics (veRL's names under `rollout_corr/`), over response tokens:
      kl = mean(log mu - log pi) (k1) and k3_kl = mean(e^l - 1 - l) (k3): KL(mu || pi);
      rollout_is_mean (applied weights, before batch normalisation), rollout_is_max (token level:
      the largest applied weight; sequence level: the largest untruncated sequence weight, as veRL),
      rollout_is_ratio_fraction_high / _low (share of tokens, or of responses at sequence level,
      whose untruncated weight is above the threshold / below the lower bound or 1/threshold: with
      TIS the share truncated), rollout_is_oob_ratio (IcePop: share of tokens whose weight was set
      to 0); rollout_rs_masked_fraction (share of tokens rejected), rollout_rs_seq_masked_fraction
      (share of non-empty responses with a token rejected), rollout_rs_<rule>_masked_fraction;
      and per staleness s present in the batch (`staleness`: (B,) trainer version - policy
      version), rollout_corr/staleness_<s>/{kl, k3_kl, samples, rollout_is_mean,
      rollout_rs_masked_fraction}: what each degree of asynchrony costs.
    """
    m = mask.bool()
    l = log_ratio(policy, behaviour, m)
    metrics: dict[str, float] = {
        "rollout_corr/kl": masked_mean(-l, m).item(),
        "rollout_corr/k3_kl": masked_mean(_k3(l), m).item(),
    }
    weights = keep = None
    nonempty = masked_count(m, dim=-1) > 0
    if rc.rollout_is is not None:
        weights = importance_weights(l, m, rc)
        shown = importance_weights(l, m, RolloutCorrection(rc.rollout_is, rc.is_upper, rc.is_lower)) \
            if rc.batch_normalize else weights
        lower = rc.is_lower if rc.is_lower is not None else 1.0 / rc.is_upper
        metrics["rollout_corr/rollout_is_mean"] = masked_mean(shown, m).item()
        if rc.rollout_is == "token":
            raw = torch.exp(l.clamp(-SAFETY_BOUND, SAFETY_BOUND))
            metrics["rollout_corr/rollout_is_max"] = (shown[m].max().item() if m.any() else 0.0)
            metrics["rollout_corr/rollout_is_ratio_fraction_high"] = _share(raw > rc.is_upper, m)
            metrics["rollout_corr/rollout_is_ratio_fraction_low"] = _share(raw < lower, m)
        else:
            seq = _sequence_log_ratio(l, m)
            metrics["rollout_corr/rollout_is_max"] = (math.exp(seq[nonempty].max().item()) if nonempty.any()
                                                     else 0.0)
            metrics["rollout_corr/rollout_is_ratio_fraction_high"] = _share(seq > math.log(rc.is_upper), nonempty)
            metrics["rollout_corr/rollout_is_ratio_fraction_low"] = _share(seq < math.log(lower), nonempty)
            raw = torch.exp(seq).unsqueeze(-1).expand_as(l)
        if rc.is_lower is not None:
            metrics["rollout_corr/rollout_is_oob_ratio"] = _share((raw < rc.is_lower) | (raw > rc.is_upper), m)
    if rc.rejection:
        keep, per_rule = rejection_mask(l, m, rc.rejection)
        rejected = m & ~keep
        metrics["rollout_corr/rollout_rs_masked_fraction"] = _share(rejected, m)
        metrics["rollout_corr/rollout_rs_seq_masked_fraction"] = _share(rejected.any(dim=-1), nonempty)
        for option, ok in per_rule.items():
            metrics[f"rollout_corr/rollout_rs_{option}_masked_fraction"] = _share(m & ~ok, m)
    if staleness is not None:
        for s in sorted({int(v) for v in staleness.tolist()}):
            rows = (staleness == s).unsqueeze(-1) & m
            prefix = f"rollout_corr/staleness_{s}"
            metrics[f"{prefix}/samples"] = float((staleness == s).sum().item())
            metrics[f"{prefix}/kl"] = masked_mean(-l, rows).item()
            metrics[f"{prefix}/k3_kl"] = masked_mean(_k3(l), rows).item()
            if weights is not None:
                metrics[f"{prefix}/rollout_is_mean"] = masked_mean(weights, rows).item()
            if keep is not None:
                metrics[f"{prefix}/rollout_rs_masked_fraction"] = _share(rows & ~keep, rows)
    return weights, keep, metrics


@declare("policy_loss", "bypass_mode", rollout_is_weights=True)
def bypass_mode(
    inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE with rollout IS weights (veRL's bypass mode with loss_type "reinforce",
    `compute_policy_loss_reinforce`): the loss compares directly with the behaviour policy mu
    (`old_log_prob`; nothing is recomputed), per token

        l = -sg(w) A log pi
    with w the rollout IS weights pi / mu of `algorithm.rollout_correction` (truncated or masked;
    w = 1 when rollout_is is null: plain REINFORCE). ppo_kl = mean(log mu - log pi); no clipping.
    """
    old = _need(inputs.old_log_prob, "behaviour log-probabilities (old_log_prob)", "bypass_mode")
    adv = _need(inputs.advantages, "advantages", "bypass_mode")
    token_loss = -adv * inputs.log_prob
    if inputs.rollout_is_weights is not None:
        token_loss = token_loss * inputs.rollout_is_weights.detach()
    mask = inputs.response_mask
    loss = aggregate_loss(token_loss, mask, loss_agg_mode)
    return loss, _metrics(loss, torch.where(mask.bool(), inputs.log_prob - old, torch.zeros_like(old)), mask)


@declare("policy_loss", "decoupled_ppo", old_log_prob="proximal", behaviour_log_prob=True)
def decoupled_ppo(
    inputs: PolicyLossInputs,
    *,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float = 3.0,
    behav_imp_weight_cap: float | None = None,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Decoupled PPO (AReaL, arXiv:2505.24298): PPO's clipped loss against the proximal policy
    pi_prox (the policy at the start of the trainer step, `old_log_prob`), weighted per token by
    how far the behaviour policy mu (`behaviour_log_prob`) is from it:

        l = sg(v) * l_ppo(pi / pi_prox, A)      v = pi_prox / mu
        v <- 0 where v > behav_imp_weight_cap   (AReaL's cap: such tokens add nothing, but stay in
                                                 the denominator; None: no cap)
    l_ppo is `ppo` (clip_range / _low / _high, dual clip clip_ratio_c). The clip bounds the update
    from pi_prox, however stale mu is; v corrects for mu != pi_prox. Metrics: ppo's, with
    pg_loss weighted, plus actor/behav_imp_weight_mean (over response tokens, capped weights 0) and
    actor/behav_capped_fraction.
    """
    if behav_imp_weight_cap is not None and behav_imp_weight_cap <= 1.0:
        raise ConfigError(f"algorithm.policy_loss_fn_args.behav_imp_weight_cap must be > 1 (AReaL's), "
                          f"got {behav_imp_weight_cap}; or null for no cap")
    prox = _need(inputs.old_log_prob, "proximal log-probabilities (old_log_prob)", "decoupled_ppo")
    behaviour = _need(inputs.behaviour_log_prob, "behaviour log-probabilities", "decoupled_ppo")
    mask = inputs.response_mask.bool()
    weight = torch.exp(log_ratio(prox, behaviour, mask).clamp(-SAFETY_BOUND, SAFETY_BOUND))
    capped = torch.zeros_like(mask) if behav_imp_weight_cap is None else (weight > behav_imp_weight_cap) & mask
    applied = torch.where(mask & ~capped, weight, torch.zeros_like(weight)).detach()
    with token_weights(applied):
        loss, metrics = ppo(inputs, clip_range=clip_range, clip_range_low=clip_range_low,
                            clip_range_high=clip_range_high, clip_ratio_c=clip_ratio_c, loss_agg_mode=loss_agg_mode)
    metrics["actor/behav_imp_weight_mean"] = masked_mean(applied, mask).item()
    metrics["actor/behav_capped_fraction"] = _share(capped, mask)
    return loss, metrics
