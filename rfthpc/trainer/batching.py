"""How a batch of samples is cut up: mini-batches per optimizer update, a share per rank, and
micro-batches per forward/backward pass.

Every rank holds the whole batch and computes the same plan, so no rank needs to ask another what
to do. FSDP2 runs collectives inside every forward and backward pass, so all ranks must run the
same number of micro-batches: a rank with fewer samples runs empty micro-batches (one padding
token, zero weight). Micro-batches are formed either by a token budget (`use_dynamic_bsz`: at most
`max_token_len_per_gpu` tokens each, padding included, packed first-fit longest first) or by a fixed
count of samples (at most `ppo_micro_batch_size_per_gpu`, samples of similar length together).

Padding-free (`trainer.use_remove_padding`): a micro-batch's samples are laid end to end in one row
(1, total tokens) with position ids restarting at 0 for each, and no attention mask; attention reads
the restarts as sample boundaries and stays within each sample (`packed_attention`, or
flash-attention's variable-length kernels). Nothing is computed on padding, and the token budget
counts real tokens.

Samples of one group share their prompt. With `trainer.share_prompt_forward` a micro-batch whose
samples repeat a prompt also carries the distinct prompts alone (`SharedPrompts`): the forward pass
then runs each prompt once, keeps its keys and values, and runs every response on its prompt's,
instead of running the prompt again with each response. Same log-probabilities and gradients (the
responses attend to the very keys and values the prompt's tokens produce; the gradient of each
prompt token sums over its responses), and for GRPO's groups of n responses, about n times fewer
prompt tokens computed.

Sequence parallelism (`sequence_parallel`): the N ranks of a group are one data-parallel replica and
run the same micro-batches, so a plan is made for world / N ranks; each rank then collates its
group's micro-batch and keeps its own slice of the packed row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from rfthpc.trainer.samples import Sample
from rfthpc.trainer.sequence_parallel import SHARD_KWARG, SequenceGroup, SequenceShard, split_row


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


def pack_token_bins(lengths: list[int], budget: int, padded: bool = True) -> list[list[int]]:
    """Indices packed into micro-batches of at most `budget` tokens: their padded size (samples x the
    longest), or with `padded` False their sum (padding-free). First fit, longest first. A sample
    longer than the budget gets a micro-batch of its own."""
    bins: list[list[int]] = []
    loads: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for k, b in enumerate(bins):
            # Longest first: a bin's first sample sets its padded width.
            load = (len(b) + 1) * lengths[b[0]] if padded else loads[k] + lengths[i]
            if load <= budget:
                b.append(i)
                loads[k] = load
                break
        else:
            bins.append([i])
            loads.append(lengths[i])
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
    padding_free: bool = False
    """Every micro-batch is packed into one row (never together with `share_prompts`)."""

    @property
    def n_micro(self) -> int:
        """Micro-batches every rank runs."""
        return len(self.micro[0])

    def micro_batches(self, samples: list[Sample], rank: int, device: torch.device,
                      sequence: SequenceGroup | None = None) -> Iterator[MicroBatch]:
        """The `n_micro` micro-batches `rank` (a data-parallel rank) runs, in order, on `device` (a rank
        with no sample for one gets the placeholder: FSDP2 needs every rank in every pass); with a
        `sequence` group, this rank's slice of each."""
        for indices in self.micro[rank]:
            yield collate(samples, indices, device, share_prompts=self.share_prompts, packed=self.padding_free,
                          sequence=sequence)


def plan_micro_batches(
    samples: list[Sample],
    indices: list[int],
    world_size: int,
    *,
    token_budget: int | None,
    micro_batch_size: int,
    share_prompts: bool = False,
    padding_free: bool = False,
) -> BatchPlan:
    """Split `indices` over ranks and each rank's share into micro-batches.

    With `token_budget`, ranks get near-equal token counts and each rank's share is packed into
    micro-batches of at most `token_budget` tokens (padded, or real ones when `padding_free`);
    without it, ranks get near-equal sample counts and micro-batches of at most `micro_batch_size`
    samples, similar lengths together. Ranks with fewer micro-batches than the most split theirs
    further (or run empty ones). `share_prompts`: when some prompt repeats among `indices`, every
    micro-batch runs each of its distinct prompts once (`SharedPrompts`). Asked for both, the plan
    takes the layout that computes fewer tokens: shared prompts (each prompt once, prompts and
    responses padded) or padding-free (every prompt each time, no padding). The plan is the same on
    every rank, so all of them run the same passes.
    """
    repeats = share_prompts and len({_prompt_key(samples[i]) for i in indices}) < len(indices)
    padded = BatchPlan(_assign(samples, indices, world_size, token_budget, micro_batch_size, padded=True), repeats)
    if not padding_free:
        return padded
    packed = BatchPlan(_assign(samples, indices, world_size, token_budget, micro_batch_size, padded=False),
                       padding_free=True)
    if repeats and _shared_prompt_tokens(samples, padded) < sum(samples[i].length for i in indices):
        return padded
    return packed


def _assign(samples: list[Sample], indices: list[int], world_size: int, token_budget: int | None,
            micro_batch_size: int, padded: bool) -> list[list[list[int]]]:
    """`BatchPlan.micro` for `plan_micro_batches` (`padded`: the token budget counts padding)."""
    lengths = [samples[i].length if token_budget is not None else 1 for i in indices]
    shares = [[indices[j] for j in part] for part in balanced_split(lengths, world_size)]
    per_rank = []
    for share in shares:
        if token_budget is not None:
            bins = pack_token_bins([samples[i].length for i in share], token_budget, padded)
            parts = [[share[j] for j in b] for b in bins]
        else:
            n = max(1, -(-len(share) // micro_batch_size))
            by_length = sorted(share, key=lambda i: (-samples[i].length, i))
            parts = [by_length[k * len(share) // n:(k + 1) * len(share) // n] for k in range(n)]
        per_rank.append(parts)
    n_micro = max(1, max(len(parts) for parts in per_rank))
    return [[sorted(p) for p in _split_to(parts, n_micro)] for parts in per_rank]


def _shared_prompt_tokens(samples: list[Sample], plan: BatchPlan) -> int:
    """Token positions the shared-prompt layout of `plan` computes: in each micro-batch its distinct
    prompts, padded to the longest, and its responses, padded to the longest."""
    total = 0
    for indices in (idx for rank in plan.micro for idx in rank if idx):
        prompts = {_prompt_key(samples[i]): len(samples[i].prompt_ids) for i in indices}
        total += len(prompts) * max(prompts.values()) + len(indices) * max(len(samples[i].response_ids)
                                                                             for i in indices)
    return total


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
    """Tensors of one micro-batch: padded (b rows, right padding) or packed (one row)."""

    indices: list[int]
    """Indices of its samples in the step's batch (empty for a padding micro-batch)."""
    input_ids: torch.Tensor
    """(b, L) prompt + response tokens; packed: (1, T), the samples one after the other."""
    attention_mask: torch.Tensor | None
    """(b, L) 1 on real tokens; None when packed."""
    positions: torch.Tensor
    """(b, R) index into its row of the output that predicts each response token (prompt_len - 1 + j,
    packed: plus the sample's offset in the row)."""
    response_ids: torch.Tensor
    """(b, R) response tokens (0 past a response's end)."""
    response_mask: torch.Tensor
    """(b, R) bool: response tokens that enter the loss."""
    tokens: torch.Tensor
    """(2, N) row and column in (b, R) of each response token, in the loss or not, row by row: where
    the forward pass computes (index tensors, so that it never waits for the GPU to count them)."""
    temperature: torch.Tensor
    """(b,) sampling temperature of each sample."""
    shared: SharedPrompts | None = None
    """The distinct prompts, when the samples repeat some and the plan shares them."""
    position_ids: torch.Tensor | None = None
    """Packed: (1, T) each token's position in its own sample (restarting at 0); None when padded."""
    sequence: SequenceShard | None = None
    """Packed and split over a sequence-parallel group: this rank's slice of the row (`input_ids` and
    `position_ids` then hold the whole row, padded to a multiple of the group's size)."""

    @property
    def is_padding(self) -> bool:
        """True for the placeholder a rank runs when it has no sample for this micro-batch."""
        return not self.indices

    def model_inputs(self) -> dict[str, object]:
        """The keyword arguments of a Hugging Face model's forward for this layout: packed, position
        ids and no attention mask (from which transformers confines attention to each sample); split
        over a group, this rank's slice and the shard its attention exchanges over."""
        if self.sequence is not None:
            s = self.sequence
            return {"input_ids": self.input_ids[:, s.begin:s.end], "position_ids": self.position_ids[:, s.begin:s.end],
                    SHARD_KWARG: s}
        if self.position_ids is not None:
            return {"input_ids": self.input_ids, "position_ids": self.position_ids}
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}

    @property
    def computed_tokens(self) -> torch.Tensor:
        """(2, n) row and column in (b, R) of the response tokens this rank computes: all of them
        (`tokens`), or split over a group those predicted within its slice."""
        return self.tokens if self.sequence is None else self.sequence.tokens

    def output_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """The row of the model's output where each sample in `rows` lies (all in row 0 when packed)."""
        return torch.zeros_like(rows) if self.position_ids is not None else rows


def collate(samples: list[Sample], indices: list[int], device: torch.device, pad_id: int = 0,
            share_prompts: bool = False, packed: bool = False, sequence: SequenceGroup | None = None) -> MicroBatch:
    """The samples `indices` as a MicroBatch on `device`, padded or `packed`; no indices gives a
    1-token placeholder. With `share_prompts` it also gets the `SharedPrompts` layout (the
    placeholder too). With a `sequence` group (packed only), this rank's slice of the row."""
    if sequence is not None and (not packed or share_prompts):
        raise ValueError("a micro-batch split over a sequence-parallel group is packed, without shared prompts")
    chosen = [samples[i] for i in indices]
    if not chosen:
        mb = _placeholder(device, pad_id, share_prompts, packed)
        none = np.zeros(1, dtype=np.int64)
        return mb if sequence is None else _split(mb, none, np.stack([none, none]), sequence, pad_id)
    lengths = [len(s.response_ids) for s in chosen]
    width = max(1, max(lengths))
    # Where each sample's tokens begin in its row: all at 0 padded, one after the other packed.
    starts = np.cumsum([0] + [s.length for s in chosen])[:-1] if packed else np.zeros(len(chosen), dtype=np.int64)
    pos = np.zeros((len(chosen), width), dtype=np.int64)
    resp = np.zeros((len(chosen), width), dtype=np.int64)
    mask = np.zeros((len(chosen), width), dtype=bool)
    for b, s in enumerate(chosen):
        p, r = len(s.prompt_ids), len(s.response_ids)
        # Past the response's end the position is clamped to the last real token; masked anyway.
        pos[b] = starts[b] + np.minimum(np.arange(width) + p - 1, p + r - 1)
        resp[b, :r] = s.response_ids
        mask[b, :r] = s.loss_mask
    tokens = np.stack([np.repeat(np.arange(len(chosen)), lengths), np.concatenate([np.arange(r) for r in lengths])])
    temps = torch.tensor([s.temperature for s in chosen], dtype=torch.float32, device=device)

    def as_t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    if packed:
        ids = np.concatenate([np.concatenate([s.prompt_ids, s.response_ids]) for s in chosen]).astype(np.int64)[None]
        position_ids = as_t(np.concatenate([np.arange(s.length) for s in chosen])[None])
        attn = None
    else:
        ids, attn = _padded(chosen, pad_id)
        position_ids = None
    shared = _shared_prompts(chosen, width, pad_id) if share_prompts else None
    mb = MicroBatch(list(indices), as_t(ids), None if attn is None else as_t(attn), as_t(pos), as_t(resp), as_t(mask),
                    as_t(tokens), temps, None if shared is None else SharedPrompts(*(as_t(a) for a in shared)),
                    position_ids)
    return mb if sequence is None else _split(mb, pos[tokens[0], tokens[1]], tokens, sequence, pad_id)


def _split(mb: MicroBatch, predicting: np.ndarray, tokens: np.ndarray, sequence: SequenceGroup,
           pad_id: int) -> MicroBatch:
    """Packed `mb` with its row padded to a multiple of the group's size, and this rank's
    `SequenceShard` of it. `tokens` (2, N): its response tokens (`MicroBatch.tokens`), predicted at
    row positions `predicting` (N,). Computed on the host, so that no rank waits for its device."""
    assert mb.position_ids is not None
    length = mb.input_ids.shape[1]
    pad, begin, mine = split_row(length, predicting, sequence.size, sequence.rank)
    device = mb.input_ids.device
    # The padding is a sample of its own (its positions start at 0): no real token attends to it, and
    # it predicts no response token.
    ids = torch.cat([mb.input_ids, torch.full((1, pad), pad_id, dtype=mb.input_ids.dtype, device=device)], dim=1)
    position_ids = torch.cat([mb.position_ids, torch.arange(pad, device=device).unsqueeze(0)], dim=1)
    end = begin + (length + pad) // sequence.size
    shard = SequenceShard(sequence.group, sequence.size, begin, end, position_ids,
                          torch.from_numpy(tokens[:, mine]).to(device), torch.from_numpy(predicting[mine] - begin).to(device))
    return dataclasses.replace(mb, input_ids=ids, position_ids=position_ids, sequence=shard)


def _padded(chosen: list[Sample], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, attention mask) of `chosen`, each (b, the longest), right-padded."""
    ids = np.full((len(chosen), max(s.length for s in chosen)), pad_id, dtype=np.int64)
    attn = np.zeros_like(ids)
    for b, s in enumerate(chosen):
        p, r = len(s.prompt_ids), len(s.response_ids)
        ids[b, :p] = s.prompt_ids
        ids[b, p:p + r] = s.response_ids
        attn[b, :p + r] = 1
    return ids, attn


def _placeholder(device: torch.device, pad_id: int, share_prompts: bool, packed: bool) -> MicroBatch:
    """The micro-batch of a rank with no sample: one padding token, in the layout the others run."""
    one = torch.full((1, 1), pad_id, dtype=torch.long, device=device)
    zero = torch.zeros_like(one)
    shared = None
    if share_prompts:
        shared = SharedPrompts(one.clone(), torch.ones_like(one), zero.clone(), torch.zeros(1, dtype=torch.long,
                               device=device), torch.ones((1, 2), dtype=torch.long, device=device), torch.ones_like(one))
    return MicroBatch([], one, None if packed else torch.ones_like(one), zero.clone(), one.clone(),
                      torch.zeros((1, 1), dtype=torch.bool, device=device),
                      torch.zeros((2, 1), dtype=torch.long, device=device), torch.ones(1, device=device), shared,
                      zero.clone() if packed else None)


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
