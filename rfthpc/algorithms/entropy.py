"""Policy entropy and the entropy bonus (`algorithm.entropy_loss_fn`, `entropy_loss_fn_args`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rfthpc.algorithms.aggregation import aggregate_loss
from rfthpc.algorithms.declare import declare

EntropyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H = -sum_v p_v log p_v over the last (vocabulary) axis, p = softmax(logits).

    log p comes from log_softmax (no log of a rounded probability), and entries with p = 0
    (including logits of -inf, e.g. a masked vocabulary) contribute exactly 0 instead of NaN.
    """
    # Half-precision logits are widened: log_softmax in bf16 loses the small probabilities.
    log_p = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    p = log_p.exp()
    # Zero log p where p = 0 *before* the product: 0 * -inf is NaN, also in the backward pass.
    return -(p * torch.where(p > 0, log_p, torch.zeros_like(log_p))).sum(dim=-1)


@declare("entropy_loss", "default", "basic", "mix")
def entropy_bonus(
    entropy: torch.Tensor, response_mask: torch.Tensor, *, entropy_coef: float = 0.0, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Entropy bonus: the term -entropy_coef * agg(H) to add to the loss.

    A positive coefficient rewards entropy. Metric `actor/entropy` = agg(H). `mix` (Trinity-RFT's entropy term
    of the mix algorithms, on the rollouts only) is this: the trainer adds it to the rollouts' loss, never to a
    mix stage's expert rows.
    """
    mean_entropy = aggregate_loss(entropy, response_mask, loss_agg_mode)
    return -entropy_coef * mean_entropy, {"actor/entropy": mean_entropy.detach().item()}


@declare("entropy_loss", "none")
def no_entropy_bonus(
    entropy: torch.Tensor, response_mask: torch.Tensor, *, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """No entropy term (0 added to the loss); still reports `actor/entropy` = agg(H)."""
    mean_entropy = aggregate_loss(entropy, response_mask, loss_agg_mode).detach()
    return torch.zeros((), dtype=entropy.dtype), {"actor/entropy": mean_entropy.item()}
