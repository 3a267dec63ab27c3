"""One optimizer update of a sharded model on one mini-batch, split over ranks and micro-batches.

The mini-batch loss is the aggregate over all its tokens (or sequences) on all ranks. Each
micro-batch's loss is aggregated over its own units, so it is weighted by

    w_mb = count(mb) / count(mini-batch)         (count per loss_agg_mode: tokens or sequences)

and the weighted losses sum to the mini-batch loss. (The -norm modes also divide by a
constant length L, the same for every micro-batch, so the same weights hold; token-sum and
token-sum-norm do not average: their micro-batch losses enter with weight 1 and add up to the
mini-batch's sum.) Metrics
are weighted by w_mb in every mode, so a fraction (pg_clipfrac) is the mini-batch's; with token-sum
a loss metric is then the count-weighted mean of the micro-batch sums. FSDP2 averages gradients over ranks, so each
rank scales its losses by the world size to make that a sum. The result does not depend on how
the mini-batch is split, so 1 rank and N ranks train the same model (up to float rounding).

With sequence parallelism the ranks of a group split each micro-batch's row and compute the same
loss; their gradients add up to the micro-batch's (`sequence_parallel`), so the scale is still the
world size, and each contributes 1/N of the metrics.

A non-finite loss or gradient norm on any rank abandons the update: gradients are dropped and
the optimizer does not step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from rfthpc.trainer.batching import BatchPlan, MicroBatch
from rfthpc.trainer.dist import DistEnv
from rfthpc.trainer.samples import Sample

MicroLoss = Callable[[nn.Module, MicroBatch, list[int]], tuple[torch.Tensor, dict[str, float]]]
"""(model, micro-batch, its sample indices) -> (loss aggregated over the micro-batch, metrics)."""


@dataclass
class LossPart:
    """Samples of a mini-batch whose loss is aggregated on its own, within one optimizer update (a mix step's
    rollouts and expert rows)."""

    indices: list[int]
    micro_loss: MicroLoss
    scale: float = 1.0
    """The part's factor in the update's loss (a mix step's 1 - mu and mu)."""
    weight: Callable[[torch.Tensor], float] | None = None
    """Counts the units the part's loss averages over in a mask; None: the updater's (the algorithm's)."""


@dataclass
class UpdateResult:
    """What one optimizer update did."""

    finite: bool
    """False when a loss or the gradient norm was NaN/inf: the update was abandoned."""
    grad_norm: float
    metrics: dict[str, float]
    """Metrics averaged over the mini-batch (weighted like the loss)."""


def grad_norm_and_clip(model: nn.Module, max_norm: float) -> float:
    """Total gradient norm over all shards; clip to `max_norm` when it is > 0 (grad_clip 0: no clip)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else math.inf)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm.item())


class ShardedUpdater:
    """Runs updates of one model: its optimizer, gradient clip and the micro-batch plan."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        env: DistEnv,
        planner: Callable[[list[Sample], list[int]], BatchPlan],
        weight: Callable[[torch.Tensor], float],
        grad_clip: float,
        forward: Callable[[nn.Module, MicroBatch], torch.Tensor],
        averaged: bool = True,
    ) -> None:
        """`weight(mask)` counts the units a loss aggregates over (Algorithm.weight); `forward(model,
        mb)` is the pass the loss runs (per-token log-probs or values), which a rank with no sample
        for a micro-batch runs on the placeholder, so that every rank runs the same passes;
        `averaged`: the loss divides by that count (False for token-sum: micro-batch losses add up)."""
        self.model = model
        self.forward = forward
        self.optimizer = optimizer
        self.env = env
        self.planner = planner
        self.weight = weight
        self.grad_clip = grad_clip
        self.averaged = averaged

    def update(self, samples: list[Sample], indices: list[int], mask: torch.Tensor,
               micro_loss: MicroLoss) -> UpdateResult:
        """One optimizer step on the samples `indices` (`mask`: the batch's (B, R) loss mask)."""
        return self.update_parts(samples, [LossPart(indices, micro_loss)], mask)

    def update_parts(self, samples: list[Sample], parts: list[LossPart], mask: torch.Tensor) -> UpdateResult:
        """One optimizer step on the sum of `parts`' losses, each aggregated over its own samples (its micro-batches
        weighted by its own count: `LossPart.weight`, else the updater's) and scaled by its `scale`; `mask`: the
        batch's (B, R) loss mask."""
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = defaultdict(float)
        finite = True
        # With one rank a shard is the whole parameter: let FSDP2 keep the unsharded parameters and
        # gradients between micro-batches instead of copying them through its collective buffers
        # for each one (it reduces once, after the last backward).
        accumulate = self.env.world_size == 1 and isinstance(self.model, FSDPModule)
        # Each rank of a sequence-parallel group computes the same metrics.
        share = 1.0 if self.env.sequence is None else 1.0 / self.env.sequence.size
        plans = [(part, self.planner(samples, part.indices)) for part in parts if part.indices]
        totals = [(part.weight or self.weight)(mask[part.indices]) for part, _ in plans]
        n_micro = sum(plan.n_micro for _, plan in plans)
        k = 0
        for (part, plan), total in zip(plans, totals, strict=True):
            weight = part.weight or self.weight
            averaged = self.averaged if part.weight is None else True
            for mb in plan.micro_batches(samples, self.env.dp_rank, self.env.device, self.env.sequence):
                if accumulate:
                    last = k == n_micro - 1
                    self.model.set_requires_gradient_sync(last)
                    self.model.set_reshard_after_backward(last)
                k += 1
                if mb.is_padding:
                    # This rank has no sample here, but FSDP2's collectives need its forward and backward.
                    (self.forward(self.model, mb).sum() * 0.0).backward()
                    continue
                loss, metrics = part.micro_loss(self.model, mb, mb.indices)
                w = weight(mb.response_mask) / total if total > 0 else 0.0
                finite = finite and bool(torch.isfinite(loss).item())
                (loss * ((w if averaged else 1.0) * part.scale * self.env.world_size)).backward()
                for name, value in metrics.items():
                    sums[name] += value * w * share
        total = sum(totals)
        finite = not self.env.any(not finite)
        norm = grad_norm_and_clip(self.model, self.grad_clip)
        finite = finite and math.isfinite(norm)
        names = sorted(sums)
        if self.env.world_size > 1:
            # A rank whose micro-batches were all padding (fewer samples than ranks) has no metrics,
            # yet every rank must reduce the same list.
            names = sorted(set().union(*self.env.all_gather_objects(names)))
        metrics = dict(zip(names, self.env.sum([sums[n] for n in names]), strict=True))
        if not finite or total <= 0:
            # Nothing to learn from (no unmasked token) or a NaN/inf: do not step, drop the gradients.
            self.optimizer.zero_grad(set_to_none=True)
            return UpdateResult(finite, norm, metrics)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return UpdateResult(True, norm, metrics)
