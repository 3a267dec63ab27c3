"""Clipped value loss for the PPO critic."""

from __future__ import annotations

import torch

from rfthpc.algorithms.aggregation import aggregate_loss, masked_mean


def value_loss(
    vpreds: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cliprange_value: float = 0.5,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped value loss (veRL's), per token:

        v_clip = clip(v, V_old - c, V_old + c)
        l      = max((v - G)^2, (v_clip - G)^2)
        L      = agg(l) / 2
    v = `vpreds` (current critic, differentiable), V_old = `values` (critic at rollout time),
    G = `returns`, c = `cliprange_value`. Metrics: critic/vf_loss, critic/vf_clipfrac (tokens where
    the clipped term is larger), critic/vpred_mean.
    """
    clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    loss_unclipped = (vpreds - returns) ** 2
    loss_clipped = (clipped - returns) ** 2
    loss = 0.5 * aggregate_loss(torch.maximum(loss_unclipped, loss_clipped), response_mask, loss_agg_mode)
    clipfrac = masked_mean((loss_clipped > loss_unclipped).to(vpreds.dtype), response_mask)
    return loss, {
        "critic/vf_loss": loss.detach().item(),
        "critic/vf_clipfrac": clipfrac.item(),
        "critic/vpred_mean": masked_mean(vpreds.detach(), response_mask).item(),
    }
