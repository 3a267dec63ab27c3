"""ReMax (Li et al. 2023, arXiv:2310.10505): REINFORCE with the reward of a greedy response as baseline.

The explorer generates, next to the task's sampled responses, one greedy (temperature 0) response
and scores it with the same reward function (and the same overlong penalty); the group carries that
reward (`Group.baseline_reward`) and the trainer hands it to the estimator as
`AdvantageInputs.baseline_rewards`.
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.advantages import AdvantageInputs, _token_rewards
from rfthpc.algorithms.declare import declare
from rfthpc.errors import ConfigError


@declare("advantage", "remax", greedy_baseline=True)
@torch.no_grad()
def remax(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax advantage: the return of each token minus the greedy response's reward b (veRL's `remax`).

        G_t = sum_{t' >= t} r_t' m_t'      (m: response mask; r: token rewards, the outcome reward on
                                            the last response token unless shaped per token)
        A_t = (G_t - b) m_t
    With an outcome reward and no KL penalty every response token gets R - b.
    Returns (A, G m). veRL leaves A and G non-zero at masked positions inside a response (an
    observation token between turns); here both are 0 there, as for every rfthpc estimator (the loss
    ignores those positions either way).
    """
    if inputs.baseline_rewards is None:
        raise ConfigError(
            "algorithm.advantage_fn: 'remax' needs the reward of a greedy response per task, but this batch "
            "has none; the explorers store it when the advantage_fn is remax (groups explored under another "
            "advantage_fn have none): explore with advantage_fn remax, or choose another advantage_fn"
        )
    if torch.isnan(inputs.baseline_rewards).any():
        raise ConfigError(
            "algorithm.advantage_fn: 'remax' got groups without a greedy baseline reward (explored under "
            "another advantage_fn, e.g. by an earlier stage); explore them with advantage_fn remax"
        )
    mask = inputs.response_mask.to(inputs.rewards.dtype)
    rewards = _token_rewards(inputs) * mask
    returns = rewards.flip(-1).cumsum(-1).flip(-1) * mask
    advantages = (returns - inputs.baseline_rewards.to(returns.dtype).unsqueeze(-1)) * mask
    return advantages, returns
