"""Step-wise advantages: each model call of a multi-turn episode is an experience of its own (a step),
and the episode, not the step, is what a group compares.

A workflow that trains each call as an experience marks it with its episode and its place in it
(`rfthpc.workflows.base.EPISODE`, `STEP`); the trainer passes them as `AdvantageInputs.episode_ids`
and `steps`. An experience without them is a whole episode, a step-wise advantage then equals its
episode-level namesake. Conventions as in `advantages`: (advantages, returns) are (B, T), zero
outside the response mask; a group without contrast (one episode, or all last-step scores equal)
gets advantage exactly 0, where Trinity-RFT gives a lone episode its reward over (1 + epsilon).
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.advantages import (
    AdvantageInputs,
    _above_std_threshold,
    _batch_std,
    _broadcast,
    _check_normalisation,
    _group_ids,
    _group_index,
    _group_mean,
    _has_contrast,
    _scores,
    _unbiased_group_std,
)
from rfthpc.algorithms.declare import declare


def _episode_index(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per response, the index of its episode in 0..E-1; per episode, the response that is its last step
    (the highest step, the latest in the batch among equals) and the number of its steps."""
    b = inputs.rewards.shape[0]
    ids = inputs.episode_ids if inputs.episode_ids is not None else torch.arange(b)
    steps = inputs.steps if inputs.steps is not None else torch.zeros(b, dtype=torch.long)
    _, episode, lengths = torch.unique(ids, return_inverse=True, return_counts=True)
    # Order key: step first, then position, so the maximum over an episode picks its last step.
    key = steps.to(torch.long) * (b + 1) + torch.arange(b)
    best = torch.full((lengths.numel(),), -1, dtype=torch.long).scatter_reduce(0, episode, key, reduce="amax")
    return episode, best % (b + 1), lengths


@declare("advantage", "step_wise_grpo", groups=True, drops_responses=True)
@torch.no_grad()
def step_wise_grpo(
    inputs: AdvantageInputs, *, epsilon: float = 1e-6, enable_step_norm: bool = False, std_cal_level: str = "group",
    std_threshold: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step-wise GRPO (Trinity-RFT's step_wise_grpo, after rLLM): within each task group the episodes are
    scored by the reward of their last step, GRPO-normalised over the group's episodes, and that score is
    every step's advantage:
        A_s = (R_last(e) - mean_{e' in g} R_last(e')) / (std_{e' in g} R_last(e') + epsilon)   for s in e
    std is unbiased. `std_cal_level: batch`: std of the last-step scores of every episode in the batch
    (1 for a batch of one). `enable_step_norm`: each step's advantage divided by its episode's number of
    steps. `std_threshold`: a group whose last-step std is at or below it, or with a single episode,
    leaves the step (every step of its episodes). A group of whole-episode experiences gets grpo's
    advantage. Returns (A, A) broadcast over the response tokens, and the (B,) responses trained.
    """
    _check_normalisation("step_wise_grpo", std_threshold, std_cal_level)
    scores = _scores(inputs)
    groups = _group_ids(inputs, "step_wise_grpo")
    episode, last, lengths = _episode_index(inputs)
    episode_scores, episode_groups = scores[last], groups[last]
    inverse, sizes, n_groups = _group_index(episode_groups)
    centred = episode_scores - _group_mean(episode_scores, inverse, n_groups)
    contrast = _has_contrast(episode_scores, inverse, n_groups)
    if std_cal_level == "batch":
        std = _batch_std(episode_scores)
    else:
        std = _unbiased_group_std(episode_scores, inverse, sizes, n_groups)
    per_episode = torch.where(contrast, centred / (std + epsilon), torch.zeros_like(centred))
    if enable_step_norm:
        per_episode = per_episode / lengths.to(per_episode.dtype)
    trained = torch.ones_like(scores, dtype=torch.bool)
    if std_threshold is not None:
        trained = _above_std_threshold(episode_scores, inverse, sizes, n_groups, std_threshold)[episode]
    out = _broadcast(per_episode[episode], inputs.response_mask)
    return out, out, trained
