"""Attention over padding-free rows, one sample at a time: `ATTENTION` ("rfthpc_sdpa").

A padding-free micro-batch is one row of samples laid end to end, position ids restarting at 0 at
each. transformers' own sdpa path confines attention to each sample with a dense block-diagonal
(T, T) mask: memory in T^2, every one of the T^2 query-key pairs computed (the masked ones too),
and an arbitrary mask keeps sdpa off its flash kernels. This implementation is sdpa, except that a
row of several samples without a mask runs sdpa's causal kernel on each sample's own slice of the
queries, keys and values: the cost of the samples' own lengths, sum_i L_i^2, and no mask. Its mask
function gives no mask to such a row; every other input (padding, a cache) gets sdpa's mask and
sdpa's computation, unchanged. On a 2-core CPU, padding-free micro-batches ran 2.5 times slower
than padded ones with transformers' mask, and faster with this (tools/bench_trainer.py).

The trainer's models take it in place of sdpa (`adopt`) when all their layers attend fully: a
sliding window lives in sdpa's mask, which a packed row does not get here.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "rfthpc_sdpa"

SHARD_KWARG = "sequence_shard"
"""The model forward's keyword argument that carries a slice of a packed row split over a
sequence-parallel group to every layer's attention (`sequence_parallel`; transformers passes a
forward's extra keyword arguments down to it). This attention takes whole rows and refuses a slice,
which it would attend to as if it were all there is."""


def _sample_starts(position_ids: torch.Tensor | None, length: int) -> list[int] | None:
    """Where each sample of a packed row (batch 1) begins, then its end; None without position ids."""
    if position_ids is None or position_ids.shape[-1] != length:
        return None
    if position_ids.shape[0] > 1:
        # The trainer packs one row; several would each need their own split.
        if bool((position_ids[:, 1:] == 0).any()):
            raise ValueError(f"{ATTENTION} takes one packed row, not {position_ids.shape[0]}")
        return None
    starts = (position_ids[0] == 0).nonzero().flatten().tolist()
    return starts + [length] if starts and starts[0] == 0 else None


def packed_sdpa_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None = None,
                          **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention ((b, T, heads, head_dim) out), each sample of a packed row on its own."""
    if kwargs.get(SHARD_KWARG) is not None:
        raise ValueError(f"{ATTENTION} got a slice of a row split over a sequence-parallel group; the model must "
                         "attend across the group (sequence_parallel.adopt)")
    bounds = None
    if attention_mask is None and query.shape[2] == key.shape[2]:
        bounds = _sample_starts(position_ids, query.shape[2])
    if bounds is None or len(bounds) == 2:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    pieces = [sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None, **kwargs)[0]
              for a, b in itertools.pairwise(bounds)]
    return torch.cat(pieces, dim=1), None


def packed_mask(*, attention_mask: torch.Tensor | None = None, q_length: int, kv_length: int, **kwargs
          ) -> torch.Tensor | None:
    """sdpa's mask, except none for a row with no padding and no cache: `packed_sdpa_attention` then
    confines each sample itself."""
    if attention_mask is None and q_length == kv_length:
        return None
    return sdpa_mask(attention_mask=attention_mask, q_length=q_length, kv_length=kv_length, **kwargs)


def _full_attention_only(config) -> bool:
    """No layer of the model attends through a sliding window."""
    types = getattr(config, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return getattr(config, "sliding_window", None) is None


def adopt(model: nn.Module) -> None:
    """Run `model`'s attention with `ATTENTION` instead of sdpa, where that changes no number."""
    config = model.config
    if getattr(config, "_attn_implementation", None) == "sdpa" and _full_attention_only(config):
        model.set_attn_implementation(ATTENTION)


AttentionInterface.register(ATTENTION, packed_sdpa_attention)
AttentionMaskInterface.register(ATTENTION, packed_mask)
