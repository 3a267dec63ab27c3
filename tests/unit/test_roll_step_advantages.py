"""ROLL's step-wise estimators (step_reinforce, gigpo: rfthpc's roll_gigpo) against a plain re-statement of ROLL's
agentic pipeline (roll/pipeline/agentic/utils.py: compute_discounted_returns, grouped_reward_norm with method
mean_std, build_state_group, compute_response_level_rewards), written here step by step with Python lists."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rfthpc.algorithms import ADVANTAGE_FNS
from rfthpc.algorithms.advantages import AdvantageInputs
from rfthpc.errors import ConfigError

# (task, episode, step, episode reward, step reward or None, state)
ROWS = [
    (0, 0, 0, 1.0, 0.0, "a"), (0, 0, 1, 1.0, 0.0, "b"), (0, 0, 2, 1.0, 1.0, "c"),
    (0, 1, 0, 0.0, 0.0, "a"), (0, 1, 1, 0.0, 0.0, "d"),
    (0, 2, 1, 0.5, 0.5, "b"), (0, 2, 0, 0.5, 0.0, "a"),  # stored out of order
    (1, 3, 0, 0.0, 0.0, "a"), (1, 4, 0, 1.0, 1.0, "a"),
]


def inputs(rows: list[tuple], step_rewards: bool = True) -> AdvantageInputs:
    states: dict[tuple[int, str], int] = {}
    return AdvantageInputs(
        rewards=torch.tensor([r[3] for r in rows]),
        response_mask=torch.ones(len(rows), 3),
        group_ids=torch.tensor([r[0] for r in rows]),
        episode_ids=torch.tensor([r[1] for r in rows]),
        steps=torch.tensor([r[2] for r in rows]),
        step_rewards=torch.tensor([math.nan if r[4] is None or not step_rewards else r[4] for r in rows]),
        state_ids=torch.tensor([states.setdefault((r[0], r[5]), len(states)) for r in rows]),
    )


def mean_std(values: list[float]) -> list[float]:
    """ROLL's reward_normalization method mean_std over one group (torch's unbiased std, + 1e-6; 0 when flat)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return [(v - mean) / (std + 1e-6) if n > 1 and std > 1e-6 else 0.0 for v in values]


def grouped(values: list[float], keys: list) -> list[float]:
    out = [0.0] * len(values)
    for key in set(keys):
        members = [i for i, k in enumerate(keys) if k == key]
        for i, v in zip(members, mean_std([values[i] for i in members]), strict=True):
            out[i] = v
    return out


def discounted(rows: list[tuple], gamma: float, earned: list[float]) -> list[float]:
    out = [0.0] * len(rows)
    for episode in {r[1] for r in rows}:
        members = sorted((i for i, r in enumerate(rows) if r[1] == episode), key=lambda i: rows[i][2])
        running = 0.0
        for i in reversed(members):
            running = earned[i] + gamma * running
            out[i] = running
    return out


def test_step_reinforce_normalises_each_steps_discounted_return_over_its_tasks_steps():
    expected = grouped(discounted(ROWS, 0.9, [r[4] for r in ROWS]), [r[0] for r in ROWS])
    adv, returns = ADVANTAGE_FNS.get("step_reinforce")(inputs(ROWS), step_reward_gamma=0.9)
    torch.testing.assert_close(adv, torch.tensor(expected).unsqueeze(-1).expand(-1, 3))
    assert torch.equal(adv, returns)


def test_without_step_rewards_the_episodes_reward_is_its_last_steps():
    last = {r[1]: max(s[2] for s in ROWS if s[1] == r[1]) for r in ROWS}
    earned = [r[3] if r[2] == last[r[1]] else 0.0 for r in ROWS]
    expected = grouped(discounted(ROWS, 0.5, earned), [r[0] for r in ROWS])
    adv, _ = ADVANTAGE_FNS.get("step_reinforce")(inputs(ROWS, step_rewards=False), step_reward_gamma=0.5)
    torch.testing.assert_close(adv[:, 0], torch.tensor(expected))


def test_gigpo_adds_the_anchor_state_groups_step_score_to_the_episodes():
    returns = discounted(ROWS, 0.95, [r[4] for r in ROWS])
    episode_part = grouped([r[3] for r in ROWS], [r[0] for r in ROWS])
    step_part = grouped(returns, [(r[0], r[5]) for r in ROWS])
    expected = [0.7 * e + 0.3 * s for e, s in zip(episode_part, step_part, strict=True)]
    adv, _ = ADVANTAGE_FNS.get("roll_gigpo")(inputs(ROWS), episode_reward_weight=0.7, step_reward_weight=0.3)
    torch.testing.assert_close(adv[:, 0], torch.tensor(expected))
    # State "a" of task 0 was met by three episodes: their first steps differ; task 1's "a" is another state.
    assert step_part[0] != 0 and step_part[1] != 0 and step_part[4] == 0.0


def test_gigpo_without_states_is_its_episode_term():
    adv, _ = ADVANTAGE_FNS.get("roll_gigpo")(dataclasses.replace(inputs(ROWS), state_ids=None))
    torch.testing.assert_close(adv[:, 0], torch.tensor(grouped([r[3] for r in ROWS], [r[0] for r in ROWS])))


@pytest.mark.parametrize("name", ["step_reinforce", "roll_gigpo"])
@pytest.mark.parametrize(("args", "message"), [
    ({"step_reward_gamma": 1.5}, "step_reward_gamma must lie in [0, 1]"),
    ({"norm_mean_type": "running"}, "norm_mean_type: unknown level 'running'"),
    ({"advantage_clip": 0}, "advantage_clip must be > 0"),
])
def test_bad_arguments_are_named(name, args, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ADVANTAGE_FNS.get(name)(inputs(ROWS), **args)
