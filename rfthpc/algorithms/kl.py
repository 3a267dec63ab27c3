"""KL regularisation against a reference model, as a reward penalty or as a loss term.

Estimators (`algorithm.kl_penalty_fn`, `algorithm.kl_loss_fn`) map per-token log-probabilities of
the policy (log p) and the reference (log q) to a per-token estimate of KL(p || q), with samples
drawn from p (J. Schulman, "Approximating KL divergence", 2020).

- In the reward (`apply_kl_penalty`): r_t <- r_t - beta * kl_t, with beta from a fixed or adaptive
  controller (`kl_penalty_fn_args`: kl_coef, adaptive, target_kl, horizon). Metrics `critic/kl`,
  `critic/kl_coeff` (veRL's names; veRL >= 0.4 calls them actor/reward_kl_penalty[_coeff]).
- Each name ending in `+` (veRL's straight-through estimators) has the value of the named estimator
  and the gradient of k2, the one whose gradient is the KL's gradient (see `_straight_through`).
- As a loss (`kl_loss`): kl_coef * agg(kl) (`kl_loss_fn_args`: kl_coef). Metrics `actor/kl_loss`
  (the KL before the coefficient), `actor/kl_coef`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rfthpc.algorithms.aggregation import aggregate_loss
from rfthpc.algorithms.declare import declare
from rfthpc.algorithms.kl_control import KLController
from rfthpc.algorithms.registry import KL_FNS

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@declare("kl", "none")
def kl_none(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """No KL regularisation: 0 for every token."""
    return torch.zeros_like(log_prob)


@declare("kl", "k1", "kl")
def kl_k1(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """k1 = log p - log q (unbiased, high variance, can be negative)."""
    return log_prob - ref_log_prob


@declare("kl", "k2", "mse", "k2+", "mse+")
def kl_k2(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """k2 = (log p - log q)^2 / 2 (biased, low variance; its gradient is the KL gradient).

    `k2+` is k2 itself: its value already has k2's gradient.
    """
    return 0.5 * (log_prob - ref_log_prob) ** 2


@declare("kl", "k3", "low_var_kl")
def kl_k3(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """k3 = q/p - log(q/p) - 1 (unbiased, low variance, >= 0).

    As in veRL, log(q/p) is clamped to [-20, 20] and the result to [-10, 10] for stability.
    """
    log_q_over_p = torch.clamp(ref_log_prob - log_prob, -20.0, 20.0)
    return torch.clamp(torch.exp(log_q_over_p) - log_q_over_p - 1.0, -10.0, 10.0)


@declare("kl", "abs")
def kl_abs(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """|log p - log q|."""
    return (log_prob - ref_log_prob).abs()


def _straight_through(value: torch.Tensor, log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """`value` forward, the gradient of k2 backward: sg(value) + k2 - sg(k2).

    k1 and k3 are unbiased estimates of KL(p || q), but the expected gradient of their samples is not
    the KL's gradient (k1's is 0 in expectation); k2's is. So the `+` estimators report the named
    estimate and train with d k2 / d log p = log p - log q.
    """
    k2 = kl_k2(log_prob, ref_log_prob)
    return value.detach() + (k2 - k2.detach())


@declare("kl", "k1+", "kl+")
def kl_k1_plus(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """k1+ = k1 in value, with the gradient of k2 (veRL's `k1+`)."""
    return _straight_through(kl_k1(log_prob, ref_log_prob), log_prob, ref_log_prob)


@declare("kl", "k3+", "low_var_kl+")
def kl_k3_plus(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """k3+ = k3 in value (clamped as k3), with the gradient of k2 (veRL's `k3+` / `low_var_kl+`).

    The gradient is k2's even where k3's clamp holds its value at 10, so a far-off reference keeps
    pulling the policy back instead of giving a zero gradient.
    """
    return _straight_through(kl_k3(log_prob, ref_log_prob), log_prob, ref_log_prob)


@declare("kl", "corrected_k3", ratio_weighted=True)
def kl_corrected_k3(log_prob: torch.Tensor, ref_log_prob: torch.Tensor,
                    old_log_prob: torch.Tensor | None = None) -> torch.Tensor:
    """Trinity-RFT's corrected_k3: k3 weighted by the importance ratio of the policy to the old policy,

        kl_t = clamp(exp(log p - log p_old), 0, 2) * (q/p - log(q/p) - 1)
    with log p_old the policy loss's old log-probabilities (the gradient flows through the ratio too,
    as in Trinity); without them (the reward penalty), k3 itself. k3 here is unclamped, as Trinity's.
    """
    log_q_over_p = ref_log_prob - log_prob
    k3 = torch.exp(log_q_over_p) - log_q_over_p - 1.0
    if old_log_prob is None:
        return k3
    return torch.clamp(torch.exp(log_prob - old_log_prob), 0.0, 2.0) * k3


@declare("kl", "abs+")
def kl_abs_plus(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """abs+ = |log p - log q| in value, with the gradient of k2 (veRL's `abs+`)."""
    return _straight_through(kl_abs(log_prob, ref_log_prob), log_prob, ref_log_prob)


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    kl_fn: str,
    controller: KLController,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Penalise token rewards with the KL of the behaviour policy to the reference model:

        r_t = s_t - beta * kl_t * m_t,   beta = controller.value before this batch
    then updates the controller with the batch KL (mean over non-empty responses of their mean token
    KL) and n_steps = batch size. Returns (token_level_rewards, {critic/kl, critic/kl_coeff}).
    """
    mask = response_mask.bool()
    kl = torch.where(mask, KL_FNS.get(kl_fn)(old_log_prob, ref_log_prob), torch.zeros_like(old_log_prob))
    beta = controller.value
    current_kl = aggregate_loss(kl, mask, "seq-mean-token-mean").item()
    controller.update(current_kl, n_steps=token_level_scores.shape[0])
    return token_level_scores - beta * kl, {"critic/kl": current_kl, "critic/kl_coeff": beta}


def kl_loss(
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    kl_fn: str,
    kl_coef: float = 0.001,
    loss_agg_mode: str = "token-mean",
    old_log_prob: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL loss term kl_coef * agg(kl(log_prob, ref_log_prob)), differentiable through log_prob.
    `old_log_prob` (the policy loss's old log-probabilities) reaches an estimator declared
    ratio_weighted (corrected_k3).

    Returns (term to add to the loss, {actor/kl_loss: agg(kl), actor/kl_coef}).
    """
    mask = response_mask.bool()
    # Padding compares 0 with 0: an inf or NaN there would reach the gradient through the estimator
    # (k2's is 0 * inf) even though aggregate_loss keeps it out of the value.
    log_prob = torch.where(mask, log_prob, torch.zeros_like(log_prob))
    ref_log_prob = torch.where(mask, ref_log_prob, torch.zeros_like(ref_log_prob))
    fn = KL_FNS.get(kl_fn)
    if old_log_prob is not None and KL_FNS.needs(kl_fn).ratio_weighted:
        old = torch.where(mask, old_log_prob, torch.zeros_like(old_log_prob))
        estimate = fn(log_prob, ref_log_prob, old_log_prob=old)  # type: ignore[call-arg]
    else:
        estimate = fn(log_prob, ref_log_prob)
    kl = aggregate_loss(estimate, mask, loss_agg_mode)
    return kl_coef * kl, {"actor/kl_loss": kl.detach().item(), "actor/kl_coef": kl_coef}
