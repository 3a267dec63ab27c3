"""Ulysses sequence parallelism (`trainer.ulysses_sequence_parallel_size: N`): one sequence on N ranks.

The trainer's ranks form a (data parallel) x (sequence parallel) grid, dp = world / N. The N ranks
of a sequence-parallel group are one data-parallel replica: they run the same micro-batches
(`batching` plans over dp ranks). A micro-batch's packed row (padding-free, position ids restarting
at each sample) is padded to a multiple of N with a padding sample and cut into N contiguous slices,
one per rank; embeddings, norms, MLPs and the LM head work on the local slice alone. Attention
needs whole samples, so around it an all-to-all (DeepSpeed-Ulysses, arXiv:2309.14509) turns

    (T/N tokens, all heads)  ->  (T tokens, heads/N)

attention runs sample by sample over the whole row for its heads (`packed_attention`; every rank
knows where the samples begin from the micro-batch it collated, so none are exchanged), and a
second all-to-all turns the output back. Each rank computes the log-probabilities of the response
tokens predicted within its slice; a sum over the group gives every rank all of them, so every rank
computes the same loss.

Gradients: the all-to-all is its own inverse, so its backward is the same exchange. The sum of the
log-probabilities passes the gradient through unchanged: each rank backpropagates the (identical)
loss through its own tokens only, and the group's parameter gradients add up to the gradient of
the replica's micro-batch. FSDP2 shards parameters over the whole world (as veRL) and averages
gradients over it; `update` scales each loss by the world size, which makes that the sum over the
replicas, as without sequence parallelism. The heads are split N ways: the model's query and
key/value head counts must be multiples of N.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from rfthpc.errors import UserError
from rfthpc.trainer import packed_attention

ATTENTION = "rfthpc_ulysses"
"""The attention implementation of a model whose micro-batches are split over a group: rfthpc's
per-sample sdpa (`packed_attention`) between two all-to-alls."""

SHARD_KWARG = packed_attention.SHARD_KWARG
"""The model forward's keyword argument that carries a micro-batch's `SequenceShard` to the
attention of every layer."""


@dataclass(frozen=True)
class SequenceGroup:
    """This rank's place in the (data parallel) x (sequence parallel) grid."""

    group: dist.ProcessGroup
    """The N ranks that split each sequence (consecutive ranks: on one node where N divides its GPUs)."""
    size: int
    """N."""
    rank: int
    """This rank's index in `group`: which slice of every row it holds."""
    dp_rank: int
    """The data-parallel replica (the group) this rank belongs to."""
    dp_size: int
    """Replicas: world size / N."""


def sequence_group(world_size: int, device_type: str, size: int) -> SequenceGroup:
    """Build the (dp, sp) device mesh (every rank calls it) and return this rank's place in it."""
    from torch.distributed.device_mesh import init_device_mesh

    if size < 1 or world_size % size:
        raise UserError(f"trainer.ulysses_sequence_parallel_size: {size} does not divide the trainer's {world_size} "
                        "ranks; use a divisor of the trainer's GPUs (nodes x GPUs per node)")
    mesh = init_device_mesh(device_type, (world_size // size, size), mesh_dim_names=("dp", "sp"))
    return SequenceGroup(mesh["sp"].get_group(), size, mesh["sp"].get_local_rank(), mesh["dp"].get_local_rank(),
                         world_size // size)


@dataclass(frozen=True)
class SequenceShard:
    """One micro-batch's packed row as one rank of a sequence-parallel group holds it."""

    group: dist.ProcessGroup
    size: int
    begin: int
    end: int
    """This rank's slice [begin, end) of the row (padded to a multiple of `size`)."""
    position_ids: torch.Tensor
    """(1, T) the whole row's position ids (restarting at 0 at each sample): attention's sample bounds."""
    tokens: torch.Tensor
    """(2, n) row and column in (b, R) of the response tokens predicted within this slice."""
    positions: torch.Tensor
    """(n,) where in the slice the output that predicts each of `tokens` lies."""


def split_row(length: int, predicting: np.ndarray, size: int, rank: int) -> tuple[int, int, np.ndarray]:
    """For a packed row of `length` tokens whose response tokens are predicted at `predicting` (N,):
    (the padding to add (0 <= pad < size), where this rank's slice begins, which of the N tokens are
    predicted in it)."""
    pad = -length % size
    width = (length + pad) // size
    begin = rank * width
    return pad, begin, np.flatnonzero((predicting >= begin) & (predicting < begin + width))


class _Exchange(torch.autograd.Function):
    """All-to-all over dim 0 (one block per rank): block j of rank i becomes block i of rank j.

    The exchange is its own inverse, so the gradient goes back through the same exchange."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        return _all_to_all(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_to_all(grad, ctx.group), None


def _all_to_all(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    return out


class _SumOverGroup(torch.autograd.Function):
    """The sum of the group's tensors, with the gradient passed through as it is: every rank computes
    the same loss from the sum and backpropagates it into its own part (see the module docstring)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def gather_tokens(columns: tuple[torch.Tensor, ...], shard: SequenceShard) -> tuple[torch.Tensor, ...]:
    """Per-token (b, R) tensors, each rank's holding its own tokens and zeros elsewhere, made whole
    on every rank (one collective for all of them; a column without gradient stays without)."""
    whole = _SumOverGroup.apply(torch.stack(columns), shard.group)
    return tuple(w if c.requires_grad else w.detach() for w, c in zip(whole.unbind(0), columns, strict=True))


def _heads_to_sequence(tensors: tuple[torch.Tensor, ...], shard: SequenceShard) -> list[torch.Tensor]:
    """(b, heads_i, T/N, d_i) each -> (b, heads_i/N, T, d_i) each, in one exchange.

    Head block j of every tensor goes to rank j, which receives every rank's slice of the sequence
    for its heads. Heads and head dims are flattened together so that query, key and value (whose
    counts and dims may differ) travel in one message: one collective per direction and layer, in
    the same order on every rank, forward and backward."""
    n = shard.size
    b, _, t, _ = tensors[0].shape
    blocks = [x.unflatten(1, (n, x.shape[1] // n)).permute(1, 0, 3, 2, 4).flatten(3) for x in tensors]
    got = _Exchange.apply(torch.cat(blocks, dim=-1), shard.group)  # (source rank = slice, b, T/N, features)
    whole = got.transpose(0, 1).reshape(b, n * t, -1)
    sizes = [x.shape[1] // n * x.shape[3] for x in tensors]
    return [part.unflatten(-1, (x.shape[1] // n, x.shape[3])).transpose(1, 2)
            for part, x in zip(whole.split(sizes, dim=-1), tensors, strict=True)]


def _sequence_to_heads(out: torch.Tensor, shard: SequenceShard) -> torch.Tensor:
    """Attention's output (b, T, heads/N, d) -> (b, T/N, heads, d): rank j's slice of the sequence,
    every head block from its rank."""
    n = shard.size
    b, t, h, d = out.shape
    got = _Exchange.apply(out.unflatten(1, (n, t // n)).transpose(0, 1).flatten(3), shard.group)
    return got.permute(1, 2, 0, 3).reshape(b, t // n, n * h, d)


def ulysses_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, sequence_shard: SequenceShard | None = None,
                      **kwargs) -> tuple[torch.Tensor, None]:
    """`packed_attention`'s per-sample sdpa ((b, heads, T/N, d) in, (b, T/N, heads, d) out) on a
    slice of a packed row; without a shard (a whole row) just that."""
    if sequence_shard is None:
        return packed_attention.packed_sdpa_attention(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is not None or query.shape[2] != key.shape[2]:
        raise ValueError(f"{ATTENTION} takes a slice of a packed row, without a mask or a cache")
    q, k, v = _heads_to_sequence((query, key, value), sequence_shard)
    kwargs["position_ids"] = sequence_shard.position_ids
    out, _ = packed_attention.packed_sdpa_attention(module, q, k, v, None, **kwargs)
    return _sequence_to_heads(out, sequence_shard), None


def adopt(model: nn.Module, size: int) -> None:
    """Make `model` take micro-batches split over a group of `size` ranks: its attention becomes
    `ATTENTION`. A UserError where that cannot give the numbers of one rank."""
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    name = getattr(config, "_name_or_path", "") or config.model_type
    if heads % size or kv_heads % size:
        raise UserError(f"trainer.ulysses_sequence_parallel_size: {size} does not divide the {heads} attention heads "
                        f"and {kv_heads} key/value heads of {name}; each rank attends with 1/{size} of both: use a "
                        "divisor of both")
    if getattr(config, "_attn_implementation", None) != packed_attention.ATTENTION:
        raise UserError(f"trainer.ulysses_sequence_parallel_size: {size} runs rfthpc's per-sample attention, "
                        f"which {name} ({config.model_type}, {config._attn_implementation} attention) does not use "
                        "(a sliding window, or another attention implementation); set it to 1")
    model.set_attn_implementation(ATTENTION)


AttentionInterface.register(ATTENTION, ulysses_attention)
AttentionMaskInterface.register(ATTENTION, packed_attention.packed_mask)
