"""Step-wise advantages: each model call of a multi-turn episode is an experience of its own (a step),
and the episode, not the step, is what a group compares.

A workflow that trains each call as an experience marks it with its episode and its place in it
(`rfthpc.workflows.base.EPISODE`, `STEP`); the trainer passes them as `AdvantageInputs.episode_ids`
and `steps`. An experience without them is a whole episode, a step-wise advantage then equals its
episode-level namesake. The GiGPO estimators (Trinity-RFT's gigpo, ROLL's as roll_gigpo) and ROLL's
step_reinforce also read what each step earned on its own (`STEP_REWARD`) and, GiGPO, the state it acted in
(`STATE`). Conventions as in
`advantages`: (advantages, returns) are (B, T), zero outside the response mask; a group without
contrast (one episode, or all last-step scores equal) gets advantage exactly 0, where Trinity-RFT
gives a lone episode its reward over (1 + epsilon) (`gigpo`, Trinity's own, keeps Trinity's).
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.advantage_args import gigpo_args, step_return_args
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
from rfthpc.algorithms.group_advantages import roll_normalise, roll_pipeline


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


def _terminal(inputs: AdvantageInputs) -> torch.Tensor:
    """(B,) the episode's score on its last step, 0 on the others: what each step earned when no step says."""
    scores = _scores(inputs)
    _, last, _ = _episode_index(inputs)
    is_last = torch.zeros(scores.shape[0], dtype=torch.bool)
    is_last[last] = True
    return torch.where(is_last, scores, torch.zeros_like(scores))


def _step_returns(inputs: AdvantageInputs, gamma: float, earned: torch.Tensor | None = None) -> torch.Tensor:
    """(B,) each step's discounted return within its episode, as ROLL's `compute_discounted_returns`:
    G_s = r_s + gamma * G_{s+1} over the episode's steps in order, r_s what step s earned (`earned`, else
    its `step_rewards`; where not given, the episode's score on its last step and 0 on the others)."""
    episode, _, _ = _episode_index(inputs)
    if earned is None:
        terminal = _terminal(inputs)
        earned = terminal if inputs.step_rewards is None else torch.where(
            torch.isnan(inputs.step_rewards), terminal, inputs.step_rewards.to(terminal.dtype))
    b = earned.shape[0]
    steps = inputs.steps if inputs.steps is not None else torch.zeros(b, dtype=torch.long)
    returns = torch.zeros_like(earned)
    # Latest step first: an episode's running return is carried back one step at a time.
    order = sorted(range(b), key=lambda i: (int(episode[i]), -int(steps[i]), -i))
    running: dict[int, float] = {}
    for i in order:
        e = int(episode[i])
        running[e] = float(earned[i]) + gamma * running.get(e, 0.0)
        returns[i] = running[e]
    return returns


@declare("advantage", "step_reinforce", groups=True, checked_by="rfthpc.algorithms.advantage_args:step_return_args")
@torch.no_grad()
def step_reinforce(
    inputs: AdvantageInputs, *, step_reward_gamma: float = 0.95, norm_mean_type: str | None = "group",
    norm_std_type: str | None = "group", epsilon: float = 1e-6, reward_clip: float | None = None,
    whiten_advantages: bool = False, advantage_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ROLL's step_reinforce (its agentic pipeline, roll/pipeline/agentic/utils.py): each step is scored by
    its discounted return within its episode,
        G_s = r_s + step_reward_gamma * G_{s+1}
    (r_s what the step earned on its own, `STEP_REWARD`; a workflow that does not say gives the episode's
    reward to its last step), and the steps' returns are normalised as ROLL's reward_normalization does,
    over every step of the task's episodes ("group", ROLL's traj_group_id) or of the batch ("batch"), by
    `norm_mean_type` / `norm_std_type` (as `lite_ppo`; ROLL's method mean_std is group/group, mean is
    group/None, identity None/None). ROLL's advantage pipeline follows (reward_clip, whiten_advantages,
    advantage_clip: as `lite_ppo`). Returns (A, A) broadcast over each step's response tokens.
    """
    step_return_args(step_reward_gamma=step_reward_gamma, norm_mean_type=norm_mean_type,
                     norm_std_type=norm_std_type, reward_clip=reward_clip, advantage_clip=advantage_clip)
    returns = _step_returns(inputs, step_reward_gamma)
    groups = _group_index(_group_ids(inputs, "step_reinforce"))
    adv = roll_normalise(returns, groups, norm_mean_type, norm_std_type, epsilon)
    out = roll_pipeline(inputs, adv, reward_clip, whiten_advantages, advantage_clip)
    return out, out


@declare("advantage", "roll_gigpo", groups=True, checked_by="rfthpc.algorithms.advantage_args:step_return_args")
@torch.no_grad()
def roll_gigpo(
    inputs: AdvantageInputs, *, step_reward_gamma: float = 0.95, episode_reward_weight: float = 1.0,
    step_reward_weight: float = 1.0, norm_mean_type: str | None = "group", norm_std_type: str | None = "group",
    epsilon: float = 1e-6, reward_clip: float | None = None, whiten_advantages: bool = False,
    advantage_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO (group-in-group policy optimisation, arXiv 2505.10978) as ROLL's gigpo computes it
    (roll/pipeline/agentic/utils.py, after verl-agent; Trinity-RFT's differs: `gigpo`): two normalised scores
    per step, weighted and added,
        A_s = episode_reward_weight * N_task(R_e) + step_reward_weight * N_state(G_s)
    R_e is the score of the step's episode (its last step's reward), normalised over every step of the
    task's episodes (as ROLL, a longer episode weighs more) or the batch by `norm_mean_type` /
    `norm_std_type`; G_s is the step's discounted return (as `step_reinforce`), normalised over the steps
    of the task's episodes that acted in the same environment state (`STATE`, GiGPO's anchor states) with
    the same method at that level (a state seen once gets 0 there). A step without a state is a state of
    its own. ROLL's advantage pipeline follows (as `lite_ppo`). Returns (A, A) broadcast over each step's
    response tokens.
    """
    step_return_args(step_reward_gamma=step_reward_gamma, norm_mean_type=norm_mean_type,
                     norm_std_type=norm_std_type, reward_clip=reward_clip, advantage_clip=advantage_clip)
    scores = _scores(inputs)
    episode, last, _ = _episode_index(inputs)
    groups = _group_ids(inputs, "roll_gigpo")
    episode_part = roll_normalise(scores[last][episode], _group_index(groups), norm_mean_type, norm_std_type,
                                  epsilon)
    b = scores.shape[0]
    states = inputs.state_ids if inputs.state_ids is not None else torch.arange(b)
    # Anchor states are compared within a task's group only.
    anchors = torch.unique(torch.stack([groups, states.to(groups.dtype)], dim=1), dim=0, return_inverse=True)[1]
    step_part = roll_normalise(_step_returns(inputs, step_reward_gamma), _group_index(anchors),
                               "group" if norm_mean_type else None, "group" if norm_std_type else None, epsilon)
    adv = episode_reward_weight * episode_part + step_reward_weight * step_part
    out = roll_pipeline(inputs, adv, reward_clip, whiten_advantages, advantage_clip)
    return out, out


def _trinity_normalise(values: torch.Tensor, keys: torch.Tensor, fnorm: str, epsilon: float,
                       lone: bool) -> torch.Tensor:
    """Trinity-RFT's GiGPO normalisation of `values` within the sets of equal `keys`: (v - mean) / (d + epsilon),
    d the set's unbiased std (`fnorm: std`) or 1 (`none`); a set of one value is `lone`: v / (1 + epsilon) if
    True, 0 if False."""
    inverse, sizes, n = _group_index(keys)
    centred = values - _group_mean(values, inverse, n)
    spread = _unbiased_group_std(values, inverse, sizes, n) if fnorm == "std" else torch.ones_like(values)
    alone = values / (1 + epsilon) if lone else torch.zeros_like(values)
    return torch.where(sizes > 1, centred / (spread + epsilon), alone)


@declare("advantage", "gigpo", groups=True, checked_by="rfthpc.algorithms.advantage_args:gigpo_args")
@torch.no_grad()
def gigpo(
    inputs: AdvantageInputs, *, omega: float = 1.0, gamma: float = 1.0, fnorm: str = "none", epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO (group-in-group policy optimisation, arXiv 2505.10978) as Trinity-RFT's gigpo computes it: an
    episode term and, weighted by `omega`, a term of the steps taken from the same state,
        A_s = N_task(R_e) + omega * N_state(G_s)
    R_e is the episode's return, the sum of what its steps earned (`STEP_REWARD`; a step that does not say
    earned 0, and an episode none of whose steps says earned its score on its last step), normalised over
    the task's episodes, one value per episode (a task of one episode: R_e / (1 + epsilon)). G_s is the
    step's discounted return, G_s = r_s + gamma * G_{s+1}, normalised over the steps of the whole batch that
    acted in the same environment state (`STATE`, GiGPO's anchor states; a state seen once, or none said,
    gives 0). Each normalisation subtracts the set's mean and divides by its unbiased std plus epsilon
    (`fnorm: std`) or by 1 + epsilon (`none`, Trinity's default). ROLL's GiGPO is `roll_gigpo`. Returns
    (A, A) broadcast over each step's response tokens.
    """
    gigpo_args(omega=omega, gamma=gamma, fnorm=fnorm, epsilon=epsilon)
    groups = _group_ids(inputs, "gigpo")
    episode, last, _ = _episode_index(inputs)
    n_episodes = last.numel()
    earned = _terminal(inputs)
    if inputs.step_rewards is not None:
        said = ~torch.isnan(inputs.step_rewards)
        any_said = torch.zeros(n_episodes, dtype=torch.long).index_add_(0, episode, said.long()) > 0
        earned = torch.where(any_said[episode], torch.nan_to_num(inputs.step_rewards.to(earned.dtype)), earned)
    totals = torch.zeros(n_episodes, dtype=earned.dtype).index_add_(0, episode, earned)
    episode_part = _trinity_normalise(totals, groups[last], fnorm, epsilon, lone=True)[episode]
    b = earned.shape[0]
    states = inputs.state_ids if inputs.state_ids is not None else torch.arange(b)
    step_part = _trinity_normalise(_step_returns(inputs, gamma, earned), states, fnorm, epsilon, lone=False)
    out = _broadcast(episode_part + omega * step_part, inputs.response_mask)
    return out, out
