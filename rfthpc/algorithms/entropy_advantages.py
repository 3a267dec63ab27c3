"""Advantage estimators that also leave tokens out of the step by how training them would move the
policy's entropy.

They follow `advantages`' conventions (an `AdvantageInputs` in, zero outside the response mask) and
declare `drops_tokens`: their third result, (B, T) bool, is False for the tokens the step leaves out,
which then leave the loss mask (no term of the loss and no denominator counts them).
"""

from __future__ import annotations

import math

import torch

from rfthpc.algorithms.advantages import (
    AdvantageInputs,
    _broadcast,
    _group_ids,
    _group_index,
    _group_normalise,
    _scores,
)
from rfthpc.algorithms.aggregation import masked_mean
from rfthpc.algorithms.declare import declare
from rfthpc.errors import ConfigError

_FLAT_SIGNAL = 1e-12
"""A batch whose entropy signal has a standard deviation below this keeps every token (Trinity's bound)."""


@declare("advantage", "clipb", groups=True, forward_outputs=("entropy",), drops_tokens=True)
@torch.no_grad()
def clipb(
    inputs: AdvantageInputs, *, mu: float = 2.5, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clip_B (arXiv:2602.03392; Trinity-RFT's `clipb`): GRPO's advantage, with the negative-advantage
    tokens whose entropy signal lies far below the batch's left out of the step.

        A_i = (R_i - mean_g(R)) / (std_g(R) + epsilon)      (grpo's; unbiased std)
        S_t = p_t (H_t + log p_t)
    p_t is the probability of token t under the behaviour policy (the explorer's log-probability,
    which Trinity's code reads as `rollout_log_probs`), H_t the entropy of the trained policy before
    this step's update at its position (one no-grad forward pass). With m and s the mean and the
    population standard deviation of S over the batch's response tokens, a token with A < 0 and
    S_t < m - mu * s leaves the step; tokens with A >= 0 all stay, and every token stays when
    s < 1e-12. A group without contrast gives A = 0 (Trinity: a lone response gets R / (1 + epsilon)).
    Returns (A, A) broadcast over the response tokens, and the (B, T) tokens kept.
    """
    if not (math.isfinite(mu) and mu >= 0):
        raise ConfigError(f"algorithm.advantage_fn_args.mu must be a finite number >= 0 for 'clipb', got {mu!r}; "
                          "the default is 2.5.")
    if inputs.entropy is None or inputs.behaviour_log_probs is None:
        raise ConfigError(
            "algorithm.advantage_fn: 'clipb' needs the behaviour log-probabilities and the policy's entropy from "
            "the trainer's forward pass, and this batch has none; the trainer computes the entropy for an "
            "advantage_fn that declares forward_outputs=('entropy',)."
        )
    scores = _scores(inputs)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "clipb"))
    adv = _broadcast(_group_normalise(scores, inverse, sizes, n_groups, epsilon, True), inputs.response_mask)
    on = inputs.response_mask.bool()
    # Masked positions may hold anything (padding): 0 there keeps the signal finite.
    log_p = torch.where(on, inputs.behaviour_log_probs, torch.zeros_like(inputs.behaviour_log_probs)).double()
    entropy = torch.where(on, inputs.entropy, torch.zeros_like(inputs.entropy)).double()
    signal = log_p.exp() * (entropy + log_p)
    mean = masked_mean(signal, on)
    std = masked_mean((signal - mean) ** 2, on).sqrt()
    if std.item() < _FLAT_SIGNAL:
        return adv, adv, on
    keep = on & ((adv >= 0) | (signal - mean >= -mu * std))
    return adv, adv, keep
