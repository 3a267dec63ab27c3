"""How a batch of samples is cut up: mini-batches per optimizer update, a share per rank, and
micro-batches per forward/backward pass.

Every rank holds the whole batch and computes the same plan, so no rank needs to ask another what
to do. FSDP2 runs collectives inside every forward and backward pass, so all ranks must run the
same number of micro-batches: a rank with fewer samples runs empty micro-batches (one padding
token, zero weight). Micro-batches are formed either by a token budget (`use_dynamic_bsz`: at most
`max_token_len_per_gpu` tokens each, padding included, packed first-fit longest first) or by a fixed
count of samples (at most `ppo_micro_batch_size_per_gpu`, samples of similar length together).

Samples of one group share their prompt. With `trainer.share_prompt_forward` a micro-batch whose
samples repeat a prompt also carries the distinct prompts alone (`SharedPrompts`): the forward pass
then runs each prompt once, keeps its keys and values, and runs every response on its prompt's,
instead of running the prompt again with each response. Same log-probabilities and gradients (the
responses attend to the very keys and values the prompt's tokens produce; the gradient of each
prompt token sums over its responses), and for GRPO's groups of n responses, about n times fewer
prompt tokens computed.
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


def pack_token_bins(lengths: list[int], budget: int) -> list[list[int]]:
    """Indices packed into micro-batches whose padded size (samples x the longest) is at most `budget`
    tokens: first fit, longest first. A sample longer than the budget gets a micro-batch of its own."""
    bins: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for b in bins:
            # Longest first: a bin's first sample sets its padded width.
            if (len(b) + 1) * lengths[b[0]] <= budget:
                b.append(i)
                break
        else:
            bins.append([i])
    return bins


def _split_to(parts: list[list[int]], n: int) -> list[list[int]]:
    """`parts` made `n` long by halving the part with most samples (a subset stays within any bound
    its part met), then by empty parts."""
    parts = [list(p) for p in parts]
    while len(parts) < n:
        big = max(range(len(parts)), key=lambda k: (len(parts[k]), -k), default=None)
        if big is None or len(parts[big]) < 2:
            parts.append([])
            continue
        half = len(parts[big]) // 2
        parts[big:big + 1] = [parts[big][:half], parts[big][half:]]
    return parts


@dataclass(frozen=True)
class BatchPlan:
    """For one mini-batch: per rank, the sample indices of each of its micro-batches."""

    micro: list[list[list[int]]]
    """micro[rank][k] = indices (into the step's samples) of micro-batch k on that rank."""
    share_prompts: bool = False
    """Every micro-batch carries `SharedPrompts` (all or none: every rank must run the same passes)."""

    @property
    def n_micro(self) -> int:
        """Micro-batches every rank runs."""
        return len(self.micro[0])

    def micro_batches(self, samples: list[Sample], rank: int, device: torch.device) -> Iterator[MicroBatch]:
        """The `n_micro` micro-batches `rank` runs, in order, padded on `device` (a rank with no sample
        for one gets the placeholder: FSDP2 needs every rank in every pass)."""
        for indices in self.micro[rank]:
            yield collate(samples, indices, device, share_prompts=self.share_prompts)


def plan_micro_batches(
    samples: list[Sample],
    indices: list[int],
    world_size: int,
    *,
    token_budget: int | None,
    micro_batch_size: int,
    share_prompts: bool = False,
) -> BatchPlan:
    """Split `indices` over ranks and each rank's share into micro-batches.

    With `token_budget`, ranks get near-equal token counts and each rank's share is packed into
    micro-batches of at most `token_budget` padded tokens; without it, ranks get near-equal sample
    counts and micro-batches of at most `micro_batch_size` samples, similar lengths together. Ranks
    with fewer micro-batches than the most split theirs further (or run empty ones). `share_prompts`:
    when some prompt repeats among `indices`, every micro-batch runs each of its distinct prompts once
    (`SharedPrompts`); the plan is the same on every rank, so all of them run the same passes.
    """
    lengths = [samples[i].length if token_budget is not None else 1 for i in indices]
    shares = [[indices[j] for j in part] for part in balanced_split(lengths, world_size)]
    per_rank = []
    for share in shares:
        if token_budget is not None:
            bins = pack_token_bins([samples[i].length for i in share], token_budget)
            parts = [[share[j] for j in b] for b in bins]
        else:
            n = max(1, -(-len(share) // micro_batch_size))
            by_length = sorted(share, key=lambda i: (-samples[i].length, i))
            parts = [by_length[k * len(share) // n:(k + 1) * len(share) // n] for k in range(n)]
        per_rank.append(parts)
    n_micro = max(1, max(len(parts) for parts in per_rank))
    micro = [[sorted(p) for p in _split_to(parts, n_micro)] for parts in per_rank]
    repeats = share_prompts and len({_prompt_key(samples[i]) for i in indices}) < len(indices)
    return BatchPlan(micro, repeats)


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
class SharedPrompts:
    """A micro-batch's distinct prompts, left-padded so that each ends where its responses start."""

    prompt_ids: torch.Tensor
    """(g, P) the distinct prompts."""
    prompt_mask: torch.Tensor
    """(g, P) 1 on real prompt tokens."""
    prompt_positions: torch.Tensor
    """(g, P) position of each prompt token (0 at its first real token)."""
    owner: torch.Tensor
    """(b,) the row of `prompt_ids` each sample's response continues."""
    attention_mask: torch.Tensor
    """(b, P + R) what each response attends to: its prompt's real tokens, then its own."""
    response_positions: torch.Tensor
    """(b, R) position of each response token (its prompt's length + j)."""


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
    valid: torch.Tensor
    """(b, R) bool: response tokens, in the loss or not (False past a response's end): the positions
    the forward pass computes."""
    temperature: torch.Tensor
    """(b,) sampling temperature of each sample."""
    shared: SharedPrompts | None = None
    """The distinct prompts, when the samples repeat some and the plan shares them."""

    @property
    def is_padding(self) -> bool:
        """True for the placeholder a rank runs when it has no sample for this micro-batch."""
        return not self.indices


def collate(samples: list[Sample], indices: list[int], device: torch.device, pad_id: int = 0,
            share_prompts: bool = False) -> MicroBatch:
    """Pad the samples `indices` into a MicroBatch on `device`; no indices gives a 1-token placeholder.
    With `share_prompts` it also gets the `SharedPrompts` layout (the placeholder too)."""
    chosen = [samples[i] for i in indices]
    if not chosen:
        one = torch.full((1, 1), pad_id, dtype=torch.long, device=device)
        shared = None
        if share_prompts:
            shared = SharedPrompts(one.clone(), torch.ones_like(one), torch.zeros_like(one),
                                   torch.zeros(1, dtype=torch.long, device=device), torch.ones((1, 2), dtype=torch.long,
                                   device=device), torch.ones_like(one))
        return MicroBatch([], one, torch.ones_like(one), torch.zeros_like(one), one.clone(),
                          torch.zeros((1, 1), dtype=torch.bool, device=device),
                          torch.ones((1, 1), dtype=torch.bool, device=device), torch.ones(1, device=device), shared)
    length = max(s.length for s in chosen)
    width = max(1, max(len(s.response_ids) for s in chosen))
    ids = np.full((len(chosen), length), pad_id, dtype=np.int64)
    attn = np.zeros((len(chosen), length), dtype=np.int64)
    pos = np.zeros((len(chosen), width), dtype=np.int64)
    resp = np.zeros((len(chosen), width), dtype=np.int64)
    mask = np.zeros((len(chosen), width), dtype=bool)
    valid = np.zeros((len(chosen), width), dtype=bool)
    for b, s in enumerate(chosen):
        p, r = len(s.prompt_ids), len(s.response_ids)
        ids[b, :p] = s.prompt_ids
        ids[b, p:p + r] = s.response_ids
        attn[b, :p + r] = 1
        # Past the response's end the position is clamped to the last real token; masked anyway.
        pos[b] = np.minimum(np.arange(width) + p - 1, p + r - 1)
        resp[b, :r] = s.response_ids
        mask[b, :r] = s.loss_mask
        valid[b, :r] = True
    temps = torch.tensor([s.temperature for s in chosen], dtype=torch.float32, device=device)

    def as_t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    shared = _shared_prompts(chosen, width, pad_id) if share_prompts else None
    return MicroBatch(list(indices), as_t(ids), as_t(attn), as_t(pos), as_t(resp), as_t(mask), as_t(valid), temps,
                      None if shared is None else SharedPrompts(*(as_t(a) for a in shared)))


def _prompt_key(sample: Sample) -> bytes:
    """The prompt's token ids as bytes (equal prompts, equal keys)."""
    return sample.prompt_ids.astype(np.int64).tobytes()


def _shared_prompts(chosen: list[Sample], width: int, pad_id: int) -> tuple[np.ndarray, ...]:
    """The arrays of `SharedPrompts` for `chosen` (responses padded to `width`)."""
    rows: dict[bytes, int] = {}
    owner = np.array([rows.setdefault(_prompt_key(s), len(rows)) for s in chosen])
    prompts = [np.frombuffer(key, dtype=np.int64) for key in rows]
    width_p = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width_p), pad_id, dtype=np.int64)
    mask = np.zeros((len(prompts), width_p), dtype=np.int64)
    for g, p in enumerate(prompts):
        ids[g, width_p - len(p):] = p
        mask[g, width_p - len(p):] = 1
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    own = np.zeros((len(chosen), width), dtype=np.int64)
    for b, s in enumerate(chosen):
        own[b, :len(s.response_ids)] = 1
    attention = np.concatenate([mask[owner], own], axis=1)
    lengths = mask.sum(axis=1)
    response_positions = lengths[owner][:, None] + np.arange(width)[None, :]
    return ids, mask, positions, owner, attention, response_positions


def pad_rows(rows: list[np.ndarray | None], width: int, dtype: type = np.float32, fill: float = 0.0) -> np.ndarray:
    """Stack 1-D arrays of different lengths into a (len(rows), width) array; None rows are all `fill`."""
    out = np.full((len(rows), width), fill, dtype=dtype)
    for b, row in enumerate(rows):
        if row is not None and len(row):
            out[b, :len(row)] = row
    return out
