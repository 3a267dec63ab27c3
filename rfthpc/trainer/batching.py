"""How a batch of samples is cut up: mini-batches per optimizer update, a share per rank, and
micro-batches per forward/backward pass.

Every rank holds the whole batch and computes the same plan, so no rank needs to ask another what
to do. FSDP2 runs collectives inside every forward and backward pass, so all ranks must run the
same number of micro-batches: a rank with fewer samples runs empty micro-batches (one padding
token, zero weight). Micro-batches are formed either by a token budget (`use_dynamic_bsz`: about
`max_token_len_per_gpu` tokens each, counted by first-fit decreasing, then balanced) or by a fixed
count of samples (`ppo_micro_batch_size_per_gpu`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from rfthpc.trainer.samples import Sample


def balanced_split(lengths: list[int], n_parts: int) -> list[list[int]]:
    """Indices split into `n_parts` lists of near-equal total length (longest first, into the lightest part).

    Deterministic: ties go to the lower part and the lower index. Each part is returned sorted.
    """
    parts: list[list[int]] = [[] for _ in range(n_parts)]
    loads = [0] * n_parts
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        p = min(range(n_parts), key=lambda p: (loads[p], p))
        parts[p].append(i)
        loads[p] += lengths[i]
    return [sorted(p) for p in parts]


def count_token_bins(lengths: list[int], budget: int) -> int:
    """Micro-batches first-fit decreasing needs to hold `lengths` within `budget` tokens each (>= 1)."""
    bins: list[int] = []
    for n in sorted(lengths, reverse=True):
        for b, load in enumerate(bins):
            if load + n <= budget:
                bins[b] += n
                break
        else:
            bins.append(n)
    return max(1, len(bins))


@dataclass(frozen=True)
class BatchPlan:
    """For one mini-batch: per rank, the sample indices of each of its micro-batches."""

    micro: list[list[list[int]]]
    """micro[rank][k] = indices (into the step's samples) of micro-batch k on that rank."""

    @property
    def n_micro(self) -> int:
        """Micro-batches every rank runs."""
        return len(self.micro[0])

    def micro_batches(self, samples: list[Sample], rank: int, device: torch.device) -> Iterator[MicroBatch]:
        """The `n_micro` micro-batches `rank` runs, in order, padded on `device` (a rank with no sample
        for one gets the placeholder: FSDP2 needs every rank in every pass)."""
        for indices in self.micro[rank]:
            yield collate(samples, indices, device)


def plan_micro_batches(
    samples: list[Sample],
    indices: list[int],
    world_size: int,
    *,
    token_budget: int | None,
    micro_batch_size: int,
) -> BatchPlan:
    """Split `indices` over ranks and each rank's share into micro-batches.

    With `token_budget`, ranks get near-equal token counts and a rank's micro-batch count is what
    first-fit decreasing needs, maximised over ranks; samples are then spread over that many
    micro-batches balanced by tokens. Without it, ranks get near-equal sample counts and
    micro-batches hold at most `micro_batch_size` samples.
    """
    lengths = [samples[i].length if token_budget is not None else 1 for i in indices]
    shares = [[indices[j] for j in part] for part in balanced_split(lengths, world_size)]
    if token_budget is not None:
        n_micro = max(count_token_bins([samples[i].length for i in share], token_budget) for share in shares)
    else:
        n_micro = max(1, max(-(-len(share) // micro_batch_size) for share in shares))
    micro = []
    for share in shares:
        parts = balanced_split([samples[i].length for i in share], n_micro)
        micro.append([[share[j] for j in part] for part in parts])
    return BatchPlan(micro)


def mini_batches(samples: list[Sample], groups_per_update: int | None) -> list[list[int]]:
    """Sample indices of each optimizer update: consecutive runs of `groups_per_update` groups
    (None or <= 0: the whole batch in one update)."""
    n_groups = max((s.group for s in samples), default=-1) + 1
    if not groups_per_update or groups_per_update <= 0 or groups_per_update >= n_groups:
        return [list(range(len(samples)))]
    out: list[list[int]] = [[] for _ in range(-(-n_groups // groups_per_update))]
    for i, s in enumerate(samples):
        out[s.group // groups_per_update].append(i)
    return [m for m in out if m]


@dataclass
class MicroBatch:
    """Padded tensors of one micro-batch (right padding)."""

    indices: list[int]
    """Indices of its samples in the step's batch (empty for a padding micro-batch)."""
    input_ids: torch.Tensor
    """(b, L) prompt + response tokens."""
    attention_mask: torch.Tensor
    """(b, L) 1 on real tokens."""
    positions: torch.Tensor
    """(b, R) index into L of the logits that predict each response token (prompt_len - 1 + j)."""
    response_ids: torch.Tensor
    """(b, R) response tokens (0 past a response's end)."""
    response_mask: torch.Tensor
    """(b, R) bool: response tokens that enter the loss."""
    temperature: torch.Tensor
    """(b,) sampling temperature of each sample."""

    @property
    def is_padding(self) -> bool:
        """True for the placeholder a rank runs when it has no sample for this micro-batch."""
        return not self.indices


def collate(samples: list[Sample], indices: list[int], device: torch.device, pad_id: int = 0) -> MicroBatch:
    """Pad the samples `indices` into a MicroBatch on `device`; no indices gives a 1-token placeholder."""
    chosen = [samples[i] for i in indices]
    if not chosen:
        one = torch.full((1, 1), pad_id, dtype=torch.long, device=device)
        return MicroBatch([], one, torch.ones_like(one), torch.zeros_like(one), one.clone(),
                          torch.zeros((1, 1), dtype=torch.bool, device=device), torch.ones(1, device=device))
    length = max(s.length for s in chosen)
    width = max(1, max(len(s.response_ids) for s in chosen))
    ids = np.full((len(chosen), length), pad_id, dtype=np.int64)
    attn = np.zeros((len(chosen), length), dtype=np.int64)
    pos = np.zeros((len(chosen), width), dtype=np.int64)
    resp = np.zeros((len(chosen), width), dtype=np.int64)
    mask = np.zeros((len(chosen), width), dtype=bool)
    for b, s in enumerate(chosen):
        p, r = len(s.prompt_ids), len(s.response_ids)
        ids[b, :p] = s.prompt_ids
        ids[b, p:p + r] = s.response_ids
        attn[b, :p + r] = 1
        # Past the response's end the position is clamped to the last real token; masked anyway.
        pos[b] = np.minimum(np.arange(width) + p - 1, p + r - 1)
        resp[b, :r] = s.response_ids
        mask[b, :r] = s.loss_mask
    temps = torch.tensor([s.temperature for s in chosen], dtype=torch.float32, device=device)

    def as_t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    return MicroBatch(list(indices), as_t(ids), as_t(attn), as_t(pos), as_t(resp), as_t(mask), temps)


def pad_rows(rows: list[np.ndarray | None], width: int, dtype: type = np.float32, fill: float = 0.0) -> np.ndarray:
    """Stack 1-D arrays of different lengths into a (len(rows), width) array; None rows are all `fill`."""
    out = np.full((len(rows), width), fill, dtype=dtype)
    for b, row in enumerate(rows):
        if row is not None and len(row):
            out[b, :len(row)] = row
    return out
