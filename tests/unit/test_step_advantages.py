"""Step-wise advantages against Trinity-RFT 0.6.0's own test cases (tests/algorithm/advantage_fn_test.py:
test_step_wise_grpo_advantage, test_batch_level_step_wise_grpo_advantage, test_step_wise_grpo_with_std_threshold):
the same experiences, given as (task, run, step) in Trinity's order, give Trinity's advantages."""

from __future__ import annotations

import pytest
import torch

from rfthpc.algorithms import ADVANTAGE_FNS
from rfthpc.algorithms.advantages import AdvantageInputs
from rfthpc.errors import ConfigError


def inputs(rows: list[tuple[int, int, int, float]], tokens: int = 5) -> AdvantageInputs:
    """(task, run, step, reward) rows as the trainer passes them: a group per task, an episode per (task, run)."""
    episodes: dict[tuple[int, int], int] = {}
    return AdvantageInputs(
        rewards=torch.tensor([r for *_, r in rows]),
        response_mask=torch.ones(len(rows), tokens),
        group_ids=torch.tensor([t for t, *_ in rows]),
        episode_ids=torch.tensor([episodes.setdefault((t, run), len(episodes)) for t, run, _, _ in rows]),
        steps=torch.tensor([s for _, _, s, _ in rows]),
    )


def test_each_step_gets_its_episodes_group_normalised_score():
    """test_step_wise_grpo_advantage: 2 tasks x 3 runs x 4 steps, reward = run: every step of run i
    gets (i - 1) / (1 + epsilon) (the group's mean 1, its std 1)."""
    rows = [(j, i, k, float(i)) for k in range(4) for i in range(3) for j in range(2)]
    adv, returns, trained = ADVANTAGE_FNS.get("step_wise_grpo")(inputs(rows), epsilon=1e-7)
    expected = torch.tensor([(i - 1.0) / (1.0 + 1e-7) for _, i, _, _ in rows]).unsqueeze(-1).expand(-1, 5)
    torch.testing.assert_close(adv, expected)
    assert torch.equal(adv, returns) and trained.all()


def test_batch_level_std_is_over_every_episodes_last_step():
    """test_batch_level_step_wise_grpo_advantage: reward = 10 task + run; the mean is the task's, the std
    that of all six episodes' last-step rewards."""
    rows = [(j, i, k, float(j * 10 + i)) for j in range(2) for i in range(3) for k in range(4)]
    adv, _, _ = ADVANTAGE_FNS.get("step_wise_grpo")(inputs(rows), epsilon=1e-7, std_cal_level="batch")
    batch_std = torch.tensor([float(j * 10 + i) for j in range(2) for i in range(3)]).std()
    expected = [(r - (10.0 * j + 1.0)) / (batch_std.item() + 1e-7) for j, _, _, r in rows]
    torch.testing.assert_close(adv[:, 0], torch.tensor(expected))


def test_std_threshold_leaves_out_every_step_of_a_flat_task():
    """test_step_wise_grpo_with_std_threshold: tasks 0 and 1 have one reward for every run and leave the
    step (40 experiences filtered, 2 of 3 groups); task 2's 20 stay."""
    rows = [(t, i, k, r) for t, value in ((0, 0.5), (1, 1.0), (2, None)) for k in range(4) for i in range(5)
            for r in [float(i) if value is None else value]]
    adv, _, trained = ADVANTAGE_FNS.get("step_wise_grpo")(inputs(rows), epsilon=1e-6, std_threshold=0.0001)
    assert trained.tolist() == [t == 2 for t, *_ in rows]
    assert int((~trained).sum()) == 40


def test_the_last_step_scores_the_episode_and_step_norm_divides_by_its_length():
    """Only an episode's last step's reward counts (its steps may carry others); enable_step_norm divides
    each step's advantage by the number of its episode's steps."""
    rows = [(0, 0, 0, 5.0), (0, 0, 1, 1.0), (0, 1, 2, 0.0), (0, 1, 0, 9.0), (0, 1, 1, 9.0)]
    adv, _, _ = ADVANTAGE_FNS.get("step_wise_grpo")(inputs(rows), epsilon=0.0)
    # last steps: run 0 step 1 (1.0), run 1 step 2 (0.0): mean 0.5, std sqrt(0.5)
    a = 0.5 / 0.5 ** 0.5
    torch.testing.assert_close(adv[:, 0], torch.tensor([a, a, -a, -a, -a]))
    normed, _, _ = ADVANTAGE_FNS.get("step_wise_grpo")(inputs(rows), epsilon=0.0, enable_step_norm=True)
    torch.testing.assert_close(normed[:, 0], torch.tensor([a / 2, a / 2, -a / 3, -a / 3, -a / 3]))


def test_whole_episodes_get_grpos_advantage():
    """Without episode ids every experience is a whole episode: the advantage is grpo's."""
    plain = AdvantageInputs(rewards=torch.tensor([1.0, 0.0, 0.0, 2.0, 3.0]), response_mask=torch.ones(5, 3),
                            group_ids=torch.tensor([0, 0, 0, 1, 1]))
    torch.testing.assert_close(ADVANTAGE_FNS.get("step_wise_grpo")(plain)[0], ADVANTAGE_FNS.get("grpo")(plain)[0])


def test_bad_arguments_are_named():
    with pytest.raises(ConfigError, match="std_cal_level must be 'group' or 'batch' for 'step_wise_grpo'"):
        ADVANTAGE_FNS.get("step_wise_grpo")(inputs([(0, 0, 0, 1.0)]), std_cal_level="run")
