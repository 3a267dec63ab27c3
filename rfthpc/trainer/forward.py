"""Forward passes over a micro-batch: per-token log-probabilities, entropy, and critic values.

For response token j of a sample with P prompt tokens, the decoder's last hidden state at position
P - 1 + j predicts it through the LM head W:

    log pi(y_j | x, y_<j) = log_softmax(W h[P - 1 + j] / T)[y_j]

with T the sampling temperature (the explorer's logprobs are taken after temperature too).

The model is not asked for logits: those would be a (b, L, V) tensor (for a 152k vocabulary at 8k
tokens, 2.5 GB per sequence in bfloat16) and log_softmax would add float32 copies of it. The
decoder runs alone, its hidden states are taken at the N response positions only, and the head is
applied to them in chunks of about `HEAD_CHUNK_LOGITS` logits; each chunk yields its tokens'
log-probabilities (and entropies, or sum_v pi_v^2) and drops its logits. With gradients, each chunk
is recomputed in the backward pass (activation checkpointing) instead of keeping its logits, so
neither pass holds more than one chunk's (chunk, V). Under FSDP2 the head's weight is whole only
inside the root's forward: the whole computation runs as one (`fsdp.in_root_forward`).

Models whose logits are not plainly head(hidden state) (a soft cap, a scale: Gemma 2/3, Cohere,
Granite) and models not listed in `PLAIN_DECODERS` take the model's own logits at the response
positions instead, with the same chunked statistics: right, but holding (b, L, V).

A micro-batch is padded, or packed into one row (padding-free, `batching`), or carries its distinct
prompts apart (`SharedPrompts`); all give the same numbers. A packed row split over a
sequence-parallel group (`sequence_parallel`) gives them too: each rank computes the tokens
predicted within its slice, and the group's sum hands every rank all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from rfthpc.algorithms import entropy_from_logits
from rfthpc.trainer.batching import BatchPlan, MicroBatch
from rfthpc.trainer.dist import DistEnv
from rfthpc.trainer.fsdp import in_root_forward
from rfthpc.trainer.packed_attention import ATTENTION
from rfthpc.trainer.samples import Sample
from rfthpc.trainer.sequence_parallel import ATTENTION as SEQUENCE_PARALLEL_ATTENTION
from rfthpc.trainer.sequence_parallel import gather_tokens

HEAD_CHUNK_LOGITS = 1 << 26
"""Logits (positions x vocabulary) per chunk of the LM head: 256 MiB in float32, about 440
positions for a 152k vocabulary. A chunk's few float32 temporaries of this size bound the memory of
the log-probability step beyond the decoder."""

PLAIN_DECODERS = frozenset({
    "llama", "mistral", "ministral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "gemma",
    "olmo2", "deepseek_v3", "glm4", "smollm3",
})
"""`config.model_type`s whose transformers 5 models compute logits = lm_head(decoder's last hidden
state) and nothing more, and build their attention masks with transformers' mask functions from
the position ids (which read each restart at 0 as the start of another sample)."""

PACKING_ATTENTION = frozenset({ATTENTION, SEQUENCE_PARALLEL_ATTENTION, "flash_attention_2", "flash_attention_3",
                               "flex_attention"})
"""Attention implementations that confine attention to each sample of a packed row at the cost of
the samples alone: sample by sample (`packed_attention`), variable-length kernels (flash-attention)
or a block mask that skips the blocks between samples (flex). transformers' sdpa and eager confine
it too, to the same numbers, but through a dense (T, T) mask that costs more than the padding saved."""


def packs_samples(model: nn.Module) -> bool:
    """Whether `model` takes padding-free micro-batches (`MicroBatch.position_ids`) to the same
    numbers as padded ones, and at less cost."""
    config = getattr(model, "config", None)
    return getattr(config, "model_type", None) in PLAIN_DECODERS and \
        getattr(config, "_attn_implementation", None) in PACKING_ATTENTION


Stat = Literal["entropy", "entropy_grad", "sum_pi_squared"]
"""What a chunk computes besides the log-probability: "entropy" (a metric, no gradient),
"entropy_grad" (differentiable) or "sum_pi_squared"."""


def _plain_head(model: nn.Module) -> nn.Module | None:
    """The LM head when `model`'s logits are exactly head(decoder's last hidden state), else None."""
    if getattr(getattr(model, "config", None), "model_type", None) not in PLAIN_DECODERS:
        return None
    return model.get_output_embeddings()


def _keeps_cache(model: nn.Module) -> bool:
    """False for a model that drops its keys and values (Hugging Face models under gradient
    checkpointing, while training): it runs whole sequences."""
    return not (getattr(model, "is_gradient_checkpointing", False) and model.training)


def _response_features(model: nn.Module, mb: MicroBatch, head: nn.Module | None) -> torch.Tensor:
    """(n, F): at each response token this rank computes (`mb.computed_tokens`), the decoder's last
    hidden state at the position that predicts it (F = hidden size), or with no plain `head` the
    model's logits (F = V)."""
    net = model.get_decoder() if head is not None else model
    rows, cols = mb.tokens
    if mb.shared is not None and _keeps_cache(model):
        return _shared_prompt_outputs(net, mb, head is not None)[rows, cols]
    out = net(**mb.model_inputs(), use_cache=False)
    if mb.sequence is not None:
        return _last(out)[0, mb.sequence.positions]
    return _last(out)[mb.output_rows(rows), mb.positions[rows, cols]]


def _last(out) -> torch.Tensor:
    """A decoder's last hidden state, or a causal LM's logits."""
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits


def _shared_prompt_outputs(net: nn.Module, mb: MicroBatch, decoder: bool) -> torch.Tensor:
    """(b, R, F) outputs at the positions predicting each response token, with each distinct prompt
    run once (`SharedPrompts`): the prompts' pass keeps its keys and values and the output at each
    prompt's last token (which predicts the first response token); each response then runs on a
    copy of its prompt's keys and values, whose gradient flows back into the prompt's pass."""
    sh = mb.shared
    assert sh is not None
    # A causal LM need not compute the prompts' logits beyond the last token's.
    keep = {} if decoder else {"logits_to_keep": 1}
    out = net(input_ids=sh.prompt_ids, attention_mask=sh.prompt_mask, position_ids=sh.prompt_positions,
              use_cache=True, **keep)
    cache = out.past_key_values
    cache.batch_select_indices(sh.owner)
    rest = _last(net(input_ids=mb.response_ids, attention_mask=sh.attention_mask, position_ids=sh.response_positions,
                     past_key_values=cache, use_cache=True))
    first = _last(out)[:, -1][sh.owner].unsqueeze(1)
    return torch.cat([first, rest[:, :-1]], dim=1)


def _chunk_stats(head: nn.Module, features: torch.Tensor, targets: torch.Tensor, temps: torch.Tensor,
                 stats: tuple[Stat, ...]) -> tuple[torch.Tensor, ...]:
    """For c positions: (log pi of each target token, then each of `stats`), from the float32 logits
    head(features) / T."""
    logits = head(features).float() / temps.unsqueeze(-1)
    log_z = torch.logsumexp(logits, dim=-1)
    log_prob = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    computed: dict[Stat, torch.Tensor] = {}
    # sum_pi_squared last: it overwrites the chunk's logits, which the other stats read.
    for stat in sorted(stats, key=lambda name: name == "sum_pi_squared"):
        if stat == "entropy_grad":
            computed[stat] = entropy_from_logits(logits)
            continue
        with torch.no_grad():
            if stat == "entropy":
                computed[stat] = entropy_from_logits(logits)
            else:
                # sum_v pi_v^2 = sum_v exp(2 log pi_v), in place over the chunk's logits.
                computed[stat] = logits.sub_(log_z.unsqueeze(-1)).mul_(2).exp_().sum(dim=-1)
    return (log_prob, *(computed[stat] for stat in stats))


def _chunked_stats(head: nn.Module, features: torch.Tensor, targets: torch.Tensor, temps: torch.Tensor,
                   stats: tuple[Stat, ...]) -> list[torch.Tensor]:
    """`_chunk_stats` over all N positions, a chunk at a time: (N,) tensors. With gradients each chunk
    is checkpointed, so its logits are recomputed in the backward pass instead of kept."""
    vocab = head.out_features if isinstance(head, nn.Linear) else features.shape[-1]
    size = max(1, HEAD_CHUNK_LOGITS // vocab)
    keep_graph = torch.is_grad_enabled() and features.requires_grad
    parts = []
    # No position still makes one (empty) chunk: a rank of a sequence-parallel group that predicts no
    # token of a micro-batch must still backpropagate through the model, whose exchanges need it.
    for begin in range(0, max(1, features.shape[0]), size):
        args = (head, features[begin:begin + size], targets[begin:begin + size], temps[begin:begin + size], stats)
        parts.append(checkpoint(_chunk_stats, *args, use_reentrant=False) if keep_graph else _chunk_stats(*args))
    return [torch.cat(column) for column in zip(*parts)]


def _response_stats(model: nn.Module, mb: MicroBatch, stats: tuple[Stat, ...]) -> tuple[torch.Tensor, ...]:
    """(b, R) float32 tensors, zero past each response's end: log pi of each response token, then
    each of `stats`."""

    def run() -> tuple[torch.Tensor, ...]:
        head = _plain_head(model)
        features = _response_features(model, mb, head)
        rows, cols = mb.computed_tokens
        columns = _chunked_stats(head if head is not None else nn.Identity(), features, mb.response_ids[rows, cols],
                                 mb.temperature[rows], stats)
        blank = torch.zeros(mb.response_ids.shape, dtype=torch.float32, device=mb.response_ids.device)
        return tuple(blank.index_put((rows, cols), c) for c in columns)

    out = in_root_forward(model, run)
    return out if mb.sequence is None else gather_tokens(out, mb.sequence)


def token_logprobs(
    model: nn.Module, mb: MicroBatch, with_entropy: bool = False, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log pi of each response token (b, R), entropy of each position (b, R) or None).

    Differentiable when grad is enabled; the entropy only with `entropy_grad` (an entropy bonus),
    else it is a metric and costs no activation memory. A padding micro-batch still runs the model
    (FSDP2's collectives need every rank) and returns zeros that depend on the output, so backward
    works.
    """
    stats = ("entropy_grad" if entropy_grad else "entropy",) if with_entropy else ()
    token_lp, *rest = _response_stats(model, mb, stats)
    entropy = rest[0] if rest else None
    if mb.is_padding:
        token_lp = token_lp * 0.0
        entropy = None if entropy is None else entropy * 0.0
    return token_lp, entropy


@torch.no_grad()
def token_logprobs_and_stats(model: nn.Module, mb: MicroBatch, stats: tuple[Stat, ...]) -> torch.Tensor:
    """(b, R, 1 + len(stats)), no gradient: log pi of each response token, then each of `stats` at its
    position ("entropy"; "sum_pi_squared", sum_v pi_v^2 over the vocabulary): what an advantage
    function declaring them as forward_outputs reads (optimal_token_baseline, clipb)."""
    out = torch.stack(_response_stats(model, mb, stats), dim=-1)
    return out * 0.0 if mb.is_padding else out


def token_values(critic: nn.Module, mb: MicroBatch) -> torch.Tensor:
    """(b, R) critic values V(s_j) of the state before each response token (the value head's output
    at the position that predicts the token, as veRL's critic)."""
    out = critic(**mb.model_inputs(), use_cache=False).logits.squeeze(-1)
    if mb.sequence is not None:
        rows, cols = mb.sequence.tokens
        blank = torch.zeros(mb.response_ids.shape, dtype=torch.float32, device=mb.response_ids.device)
        values, = gather_tokens((blank.index_put((rows, cols), out[0, mb.sequence.positions].float()),), mb.sequence)
    else:
        rows = torch.arange(mb.positions.shape[0], device=mb.positions.device).unsqueeze(1)
        values = out[mb.output_rows(rows), mb.positions].float()
    return values * 0.0 if mb.is_padding else values


def sharded_forward(
    fn: Callable[[MicroBatch], torch.Tensor],
    samples: list[Sample],
    env: DistEnv,
    planner: Callable[[list[Sample], list[int]], BatchPlan],
) -> list[np.ndarray]:
    """`fn` (a no-grad per-token forward) over every sample, split over the (data-parallel) ranks;
    returns, on every rank, one float32 array per sample with one value per response token."""
    plan = planner(samples, list(range(len(samples))))
    mine: dict[int, np.ndarray] = {}
    with torch.no_grad():
        for mb in plan.micro_batches(samples, env.dp_rank, env.device, env.sequence):
            out = fn(mb).float().cpu().numpy()
            for row, i in enumerate(mb.indices):
                mine[i] = out[row, :len(samples[i].response_ids)].copy()
    merged: dict[int, np.ndarray] = {}
    for part in env.all_gather_objects(mine) if env.world_size > 1 else [mine]:
        merged.update(part)
    return [merged[i] for i in range(len(samples))]
