"""Masked reductions of token-level tensors: loss aggregation, masked mean, whitening.

`aggregate_loss` implements veRL's `loss_agg_mode` (`algorithm.loss_agg_mode` here).

Masks are read as booleans (nonzero = token counts). Masked-out positions never reach the result,
even when they hold inf or NaN, and a batch with no tokens gives 0, never NaN.

`token_weights(w)` makes every `aggregate_loss` inside it weight its per-token losses by w: the
one place where rollout importance weights (and decoupled PPO's) multiply a policy loss's
per-token loss, whatever the loss, without each loss having to know about them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from rfthpc.algorithms.registry import check_loss_agg_mode
from rfthpc.errors import ConfigError


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum_{i: mask_i} values_i (over `dim`, or everything)."""
    kept = torch.where(mask.bool(), values, torch.zeros_like(values))
    return kept.sum() if dim is None else kept.sum(dim)


def masked_count(mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Number of unmasked entries (over `dim`, or everything), as a float tensor."""
    flags = mask.bool().to(torch.get_default_dtype())
    return flags.sum() if dim is None else flags.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum_{mask} values / max(count_{mask}, 1): the mean of the unmasked entries, 0 if there are none."""
    return masked_sum(values, mask, dim) / masked_count(mask, dim).clamp(min=1).to(values.dtype)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mu) / sqrt(var + eps) with mu and the unbiased variance var taken over the unmasked entries.

    var = sum_{mask} (x - mu)^2 / max(n - 1, 1), so one token whitens to 0 rather than failing.
    """
    mean = masked_mean(values, mask)
    count = masked_count(mask).to(values.dtype)
    var = masked_sum((values - mean) ** 2, mask) / (count - 1).clamp(min=1)
    return (values - mean) * torch.rsqrt(var + eps)


@dataclass
class TokenWeights:
    """Per-token weights active in a `token_weights` block, and how many aggregations used them."""

    weights: torch.Tensor
    uses: int = 0


_ACTIVE: ContextVar[tuple[TokenWeights, ...]] = ContextVar("rfthpc_token_weights", default=())


@contextmanager
def token_weights(weights: torch.Tensor) -> Iterator[TokenWeights]:
    """Within the block, `aggregate_loss(l, m, mode)` aggregates sg(weights) * l (nested blocks
    multiply). `weights` must have the loss matrices' (B, T) shape; a loss that aggregates anything
    of another shape raises ConfigError (it must take the weights itself: declare
    rollout_is_weights=True). The yielded record counts the aggregations that used the weights."""
    record = TokenWeights(weights.detach())
    token = _ACTIVE.set((*_ACTIVE.get(), record))
    try:
        yield record
    finally:
        _ACTIVE.reset(token)


def _weighted(loss_mat: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    for record in _ACTIVE.get():
        if record.weights.shape != loss_mat.shape:
            raise ConfigError(
                f"the policy loss aggregates a loss of shape {tuple(loss_mat.shape)}, but the per-token importance "
                f"weights are {tuple(record.weights.shape)}; a loss that does not aggregate per-token losses must "
                "take the weights itself: declare it with rollout_is_weights=True and read "
                "inputs.rollout_is_weights"
            )
        # torch.where, not a product, on masked positions: there a loss may hold inf (inf * 0 = NaN).
        loss_mat = torch.where(loss_mask.bool(), loss_mat * record.weights.to(loss_mat.dtype), loss_mat)
        record.uses += 1
    return loss_mat


_LOSS_SCALE_FACTOR: ContextVar[float | None] = ContextVar("loss_scale_factor", default=None)


@contextmanager
def loss_scale(factor: float | None) -> Iterator[None]:
    """Within the block, `seq-mean-token-sum-norm` divides by `factor` (None: by the padded width).

    The trainer sets the run's constant length here once for a whole loss (policy loss, entropy, KL
    loss, value loss), so every function that aggregates with the mode, a user's own included,
    divides by the same constant without taking it as an argument.
    """
    token = _LOSS_SCALE_FACTOR.set(factor)
    try:
        yield
    finally:
        _LOSS_SCALE_FACTOR.reset(token)


def aggregate_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Reduce a (batch, tokens) loss to a scalar, with veRL's semantics.

    With m the mask, l the loss, n_b = sum_t m_bt and S = {b : n_b > 0} (empty responses excluded):
      token-mean:               sum_bt m_bt l_bt / sum_bt m_bt
      token-sum:                sum_bt m_bt l_bt
      seq-mean-token-mean:      (1/|S|) sum_{b in S} (sum_t m_bt l_bt / n_b)
      seq-mean-token-sum:       (1/|S|) sum_{b in S} sum_t m_bt l_bt
      seq-mean-token-sum-norm:  (1/(|S| L)) sum_{b in S} sum_t m_bt l_bt   (Dr. GRPO; veRL's)
      token-sum-norm:           (1/L) sum_bt m_bt l_bt   (Trinity-RFT's seq-mean-token-sum-norm, and veRL's
                                before it averaged over responses: |S| times the loss above)
    L is `loss_scale_factor`, else the one `loss_scale` set, else the padded width loss_mat.shape[-1]
    (veRL's default; in rfthpc a micro-batch is padded to its own longest response, so the trainer
    sets a constant L instead: see `algorithm.loss_scale_factor`). A batch with no unmasked token
    gives 0. Inside `token_weights(w)`, l is replaced
    by w * l.
    """
    check_loss_agg_mode(loss_agg_mode)
    loss_mat = _weighted(loss_mat, loss_mask)
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask)
    if loss_agg_mode == "token-sum-norm":
        return masked_sum(loss_mat, loss_mask) / _scale(loss_mat, loss_scale_factor)
    seq_sum = masked_sum(loss_mat, loss_mask, dim=-1)
    seq_len = masked_count(loss_mask, dim=-1).to(loss_mat.dtype)
    per_seq = seq_sum / seq_len.clamp(min=1) if loss_agg_mode == "seq-mean-token-mean" else seq_sum
    loss = masked_mean(per_seq, seq_len > 0)
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / _scale(loss_mat, loss_scale_factor)
    return loss


def _scale(loss_mat: torch.Tensor, factor: float | None) -> float:
    """L of the -norm modes: `factor`, else the one `loss_scale` set, else the padded width."""
    if factor is None:
        factor = _LOSS_SCALE_FACTOR.get()
    return loss_mat.shape[-1] if factor is None else factor


def aggregation_count(loss_mask: torch.Tensor, loss_agg_mode: str = "token-mean") -> torch.Tensor:
    """The units `aggregate_loss` aggregates over: tokens for token-mean, token-sum and token-sum-norm,
    non-empty sequences for the seq-mean modes.

    A mode that averages (every mode but token-sum) divides by this count (times the constant L
    for seq-mean-token-sum-norm), so a trainer that splits a batch into micro-batches gets the
    whole-batch loss exactly by weighting each micro-batch loss with count_micro / count_batch;
    token-sum's and token-sum-norm's micro-batch losses simply add up (`averages`).
    """
    check_loss_agg_mode(loss_agg_mode)
    if loss_agg_mode in ("token-mean", "token-sum", "token-sum-norm"):
        return masked_count(loss_mask)
    return (masked_count(loss_mask, dim=-1) > 0).sum().to(torch.get_default_dtype())


def averages(loss_agg_mode: str) -> bool:
    """Whether the mode divides by its `aggregation_count` (all but token-sum and token-sum-norm, sums)."""
    check_loss_agg_mode(loss_agg_mode)
    return loss_agg_mode not in ("token-sum", "token-sum-norm")
