"""Forward passes over a micro-batch: per-token log-probabilities, entropy, and critic values.

For response token j of a sample with P prompt tokens, the logits at position P - 1 + j predict it:

    log pi(y_j | x, y_<j) = log_softmax(logits[P - 1 + j] / T)[y_j]

with T the sampling temperature (the explorer's logprobs are taken after temperature too).
Only the response positions are turned into probabilities, so the cost beyond the model is
O(b * R * V), not O(b * L * V).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from rfthpc.algorithms import entropy_from_logits
from rfthpc.trainer.batching import BatchPlan, MicroBatch
from rfthpc.trainer.dist import DistEnv
from rfthpc.trainer.samples import Sample


def _response_logits(model: nn.Module, mb: MicroBatch) -> torch.Tensor:
    """(b, R, V) float32 logits at the positions predicting each response token, divided by T."""
    if mb.shared is not None and _keeps_cache(model):
        picked = _shared_prompt_logits(model, mb)
    else:
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits
        index = mb.positions.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
        picked = torch.gather(logits, 1, index)
    return picked.float() / mb.temperature.view(-1, 1, 1)


def _keeps_cache(model: nn.Module) -> bool:
    """False for a model that drops its keys and values (Hugging Face models under gradient
    checkpointing, while training): it runs whole sequences."""
    return not (getattr(model, "is_gradient_checkpointing", False) and model.training)


def _shared_prompt_logits(model: nn.Module, mb: MicroBatch) -> torch.Tensor:
    """The response logits with each distinct prompt run once (`SharedPrompts`): the prompts' pass
    keeps its keys and values and the logits of each prompt's last token (which predict the first
    response token); each response then runs on a copy of its prompt's keys and values, whose
    gradient flows back into the prompt's pass."""
    sh = mb.shared
    assert sh is not None
    out = model(input_ids=sh.prompt_ids, attention_mask=sh.prompt_mask, position_ids=sh.prompt_positions,
                use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_select_indices(sh.owner)
    rest = model(input_ids=mb.response_ids, attention_mask=sh.attention_mask, position_ids=sh.response_positions,
                 past_key_values=cache, use_cache=True).logits
    first = out.logits[:, -1][sh.owner].unsqueeze(1)
    return torch.cat([first, rest[:, :-1]], dim=1)


def token_logprobs(
    model: nn.Module, mb: MicroBatch, with_entropy: bool = False, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log pi of each response token (b, R), entropy of each position (b, R) or None).

    Differentiable when grad is enabled; the entropy only with `entropy_grad` (an entropy bonus),
    else it is a metric and costs no activation memory. A padding micro-batch still runs the model
    (FSDP2's collectives need every rank) and returns zeros that depend on the output, so backward
    works.
    """
    logits = _response_logits(model, mb)
    log_probs = torch.log_softmax(logits, dim=-1)
    token_lp = torch.gather(log_probs, -1, mb.response_ids.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    if mb.is_padding:
        token_lp = token_lp * 0.0
        entropy = None if entropy is None else entropy * 0.0
    return token_lp, entropy


@torch.no_grad()
def token_logprobs_and_sum_pi_squared(model: nn.Module, mb: MicroBatch) -> torch.Tensor:
    """(b, R, 2), no gradient: log pi of each response token, and sum_v pi_v^2 over the vocabulary
    at its position (what the optimal token baseline reads).

    sum_v pi_v^2 = sum_v exp(2 log pi_v) is taken in place over the logits' buffer, so the pass holds
    no (b, R, V) tensor beyond the float32 logits `token_logprobs` makes too.
    """
    scratch = _response_logits(model, mb)
    scratch -= torch.logsumexp(scratch, dim=-1, keepdim=True)  # now log pi
    token_lp = torch.gather(scratch, -1, mb.response_ids.unsqueeze(-1)).squeeze(-1)
    out = torch.stack([token_lp, scratch.mul_(2).exp_().sum(dim=-1)], dim=-1)
    return out * 0.0 if mb.is_padding else out


def token_values(critic: nn.Module, mb: MicroBatch) -> torch.Tensor:
    """(b, R) critic values V(s_j) of the state before each response token (the value head's output
    at the position that predicts the token, as veRL's critic)."""
    out = critic(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits.squeeze(-1)
    values = torch.gather(out, 1, mb.positions).float()
    return values * 0.0 if mb.is_padding else values


def sharded_forward(
    fn: Callable[[MicroBatch], torch.Tensor],
    samples: list[Sample],
    env: DistEnv,
    planner: Callable[[list[Sample], list[int]], BatchPlan],
) -> list[np.ndarray]:
    """`fn` (a no-grad per-token forward) over every sample, split over the ranks; returns, on every
    rank, one float32 array per sample with one value per response token."""
    plan = planner(samples, list(range(len(samples))))
    mine: dict[int, np.ndarray] = {}
    with torch.no_grad():
        for mb in plan.micro_batches(samples, env.rank, env.device):
            out = fn(mb).float().cpu().numpy()
            for row, i in enumerate(mb.indices):
                mine[i] = out[row, :len(samples[i].response_ids)].copy()
    merged: dict[int, np.ndarray] = {}
    for part in env.all_gather_objects(mine) if env.world_size > 1 else [mine]:
        merged.update(part)
    return [merged[i] for i in range(len(samples))]
