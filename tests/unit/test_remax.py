"""ReMax's advantage: by hand, and against veRL 0.9.1's `compute_remax_outcome_advantage`."""

from __future__ import annotations

import math

import pytest
import torch

from rfthpc.algorithms import ADVANTAGE_FNS
from rfthpc.algorithms.advantages import AdvantageInputs
from rfthpc.errors import ConfigError


def test_remax_is_declared_with_a_greedy_baseline() -> None:
    needs = ADVANTAGE_FNS.needs("remax")
    assert needs.greedy_baseline and not needs.groups and not needs.critic


def test_outcome_reward_minus_the_greedy_reward_on_every_response_token() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    baselines = torch.tensor([0.25, 0.5, 1.0])
    adv, returns = ADVANTAGE_FNS.get("remax")(AdvantageInputs(rewards, mask, baseline_rewards=baselines))
    assert adv.tolist() == [[0.75, 0.75, 0.75], [-0.5, -0.5, 0.0], [0.0, 0.0, 0.0]]
    assert returns.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]


def test_values_of_verl() -> None:
    """Inputs and outputs of veRL 0.9.1's core_algos.compute_remax_outcome_advantage(token_level_rewards,
    reward_baselines, response_mask) (run with /tmp/verl-venv). Row 0 has a hole in its mask (an
    observation token), row 2 is fully padded, row 3 has one token. veRL leaves the hole's advantage
    and return non-zero (1.0, 1.0); rfthpc zeroes every masked position (see the docstring)."""
    token_rewards = torch.tensor([[0., 0., 1.0, 0.], [0., 0.5, 0., 0.], [0., 0., 0., 0.], [2.0, 0., 0., 0.]])
    mask = torch.tensor([[1., 0., 1., 0.], [1., 1., 0., 0.], [0., 0., 0., 0.], [1., 0., 0., 0.]])
    baselines = torch.tensor([0.25, 1.0, 0.5, -1.0])
    verl_adv = [[0.75, 1.0, 0.75, 0.0], [-0.5, -0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]]
    verl_ret = [[1.0, 1.0, 1.0, 0.0], [0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]]
    inputs = AdvantageInputs(token_rewards.sum(-1), mask, token_level_rewards=token_rewards, baseline_rewards=baselines)
    adv, returns = ADVANTAGE_FNS.get("remax")(inputs)
    torch.testing.assert_close(adv, torch.tensor(verl_adv) * mask, rtol=1e-5, atol=0)
    torch.testing.assert_close(returns, torch.tensor(verl_ret) * mask, rtol=1e-5, atol=0)

    # Rewards shaped per token (a KL penalty): the return runs backwards over the response.
    shaped = torch.tensor([[-0.1, 0.2, 0.9], [0.05, -0.05, 0.0]])
    mask = torch.tensor([[1., 1., 1.], [1., 1., 0.]])
    inputs = AdvantageInputs(torch.tensor([1.0, 0.0]), mask, token_level_rewards=shaped,
                             baseline_rewards=torch.tensor([0.5, 0.0]))
    adv, returns = ADVANTAGE_FNS.get("remax")(inputs)
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.6000000238418579, 0.3999999761581421],
                                                  [0.0, -0.05000000074505806, 0.0]]), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.100000023841858, 0.8999999761581421],
                                                      [0.0, -0.05000000074505806, 0.0]]), rtol=1e-5, atol=1e-7)


def test_without_a_baseline_it_says_how_to_get_one() -> None:
    inputs = AdvantageInputs(torch.tensor([1.0]), torch.tensor([[1]]))
    with pytest.raises(ConfigError, match="'remax' needs the reward of a greedy response"):
        ADVANTAGE_FNS.get("remax")(inputs)
    partial = AdvantageInputs(torch.tensor([1.0, 0.0]), torch.tensor([[1], [1]]),
                              baseline_rewards=torch.tensor([0.5, math.nan]))
    with pytest.raises(ConfigError, match="groups without a greedy baseline reward"):
        ADVANTAGE_FNS.get("remax")(partial)
