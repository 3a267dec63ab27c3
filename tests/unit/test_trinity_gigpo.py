"""Trinity-RFT's GiGPO (`advantage_fn: gigpo`, `algorithm_type: gigpo`) on the inputs of Trinity's own tests
(tests/algorithm/test_gigpo_advantage.py): each case's advantages as Trinity's definition gives them, worked
out by hand, and the relations Trinity's tests assert."""

from __future__ import annotations

import math

import pytest
import torch

from rfthpc.algorithms import ADVANTAGE_FNS
from rfthpc.algorithms.advantages import AdvantageInputs
from rfthpc.algorithms.presets import ALGORITHM_PRESETS
from rfthpc.errors import ConfigError

EPS = 1e-6


def inputs(rows: list[tuple]) -> AdvantageInputs:
    """(task, run, step, reward, step reward or None, state or None) rows, as the trainer passes them: a group
    per task, an episode per (task, run), one state id per state across the batch."""
    episodes: dict[tuple[int, int], int] = {}
    states: dict[object, int] = {}
    return AdvantageInputs(
        rewards=torch.tensor([float(r[3]) for r in rows]),
        response_mask=torch.ones(len(rows), 3),
        group_ids=torch.tensor([r[0] for r in rows]),
        episode_ids=torch.tensor([episodes.setdefault((r[0], r[1]), len(episodes)) for r in rows]),
        steps=torch.tensor([r[2] for r in rows]),
        step_rewards=torch.tensor([math.nan if r[4] is None else float(r[4]) for r in rows]),
        state_ids=torch.tensor([states.setdefault(r[5] if r[5] is not None else ("own", i), len(states))
                                for i, r in enumerate(rows)]),
    )


def gigpo(rows: list[tuple], **args: object) -> list[float]:
    adv, returns = ADVANTAGE_FNS.get("gigpo")(inputs(rows), **args)
    assert torch.equal(adv, returns)
    assert torch.equal(adv, adv[:, :1].expand_as(adv)), "one value over each step's response tokens"
    return adv[:, 0].tolist()


def test_episode_advantage_broadcast():
    """Two runs of three steps, the first earning 1 on its last step: with omega 0 every step of a run gets its
    episode's return centred over the task's runs, (1 - 0.5) / (1 + eps) and (0 - 0.5) / (1 + eps)."""
    rows = [(0, run, step, terminal, terminal if step == 2 else 0.0, f"unique_{run}_{step}")
            for run, terminal in enumerate([1.0, 0.0]) for step in range(3)]
    got = gigpo(rows, omega=0.0, fnorm="none")
    assert got == pytest.approx([0.5 / (1 + EPS)] * 3 + [-0.5 / (1 + EPS)] * 3, abs=1e-7)


def test_anchor_state_grouping():
    """Both runs' first steps act in anchor state A; run 0 then earns 1, run 1 nothing. Steps from A differ by
    their discounted returns (1 and 0, centred: +-0.5) on top of the episodes' (+-0.5)."""
    rows = [(0, 0, 0, 1.0, 0.0, "anchor_state_A"), (0, 0, 1, 1.0, 1.0, "other_0_1"),
            (0, 1, 0, 0.0, 0.0, "anchor_state_A"), (0, 1, 1, 0.0, 0.0, "other_1_1")]
    got = gigpo(rows, omega=1.0, gamma=1.0, fnorm="none")
    assert got == pytest.approx([x / (1 + EPS) for x in (1.0, 0.5, -1.0, -0.5)], abs=1e-7)
    assert got[0] != pytest.approx(got[2])


def test_singleton_anchor_zero_step_adv():
    """Every state seen once: the step term is 0, omega changes nothing."""
    rows = [(0, 0, 0, 0.0, 0.0, "only_0"), (0, 1, 0, 1.0, 1.0, "only_1")]
    full, episode_only = gigpo(rows, omega=1.0), gigpo(rows, omega=0.0)
    assert full == episode_only == pytest.approx([-0.5 / (1 + EPS), 0.5 / (1 + EPS)], abs=1e-7)


def test_omega_zero():
    """One shared state, step rewards 0 and 1: the episode term is +-0.5, the step term +-0.5, added by omega 1."""
    rows = [(0, 0, 0, 0.0, 0.0, "shared"), (0, 1, 0, 1.0, 1.0, "shared")]
    assert gigpo(rows, omega=0.0) == pytest.approx([-0.5 / (1 + EPS), 0.5 / (1 + EPS)], abs=1e-7)
    assert gigpo(rows, omega=1.0) == pytest.approx([-1.0 / (1 + EPS), 1.0 / (1 + EPS)], abs=1e-7)


def test_fnorm_none_vs_std():
    """Step rewards 0 and 10 from one state: centred only, 5 + 5; divided by the std (sqrt(50)), sqrt(2)."""
    rows = [(0, 0, 0, 0.0, 0.0, "anchor"), (0, 1, 0, 0.0, 10.0, "anchor")]
    assert gigpo(rows, omega=1.0, fnorm="none")[1] == pytest.approx(10.0 / (1 + EPS), abs=1e-5)
    assert gigpo(rows, omega=1.0, fnorm="std")[1] == pytest.approx(10.0 / (50 ** 0.5 + EPS), abs=1e-5)


def test_sparse_reward_fallback():
    """No step says what it earned: the episode's reward counts on its last step only (run 0: 1, run 1: 0)."""
    rows = [(0, 0, 0, 1.0, None, None), (0, 0, 1, 1.0, None, None),
            (0, 1, 0, 0.0, None, None), (0, 1, 1, 0.0, None, None)]
    got = gigpo(rows, omega=0.0)
    assert got == pytest.approx([0.5 / (1 + EPS)] * 2 + [-0.5 / (1 + EPS)] * 2, abs=1e-7)
    assert got[0] > 0


def test_states_meet_across_tasks_a_lone_episode_keeps_its_return_and_gamma_discounts():
    """Trinity's anchors span the batch: task 1's step from S meets task 0's. A task of one episode scores
    R / (1 + eps). With gamma 0.5 a step two before a reward of 1 returns 0.25; a step that does not say what
    it earned, in an episode whose other steps do, earned 0."""
    rows = [(0, 0, 0, 1.0, 0.0, "S"), (0, 0, 1, 1.0, 0.0, "T"), (0, 0, 2, 1.0, 1.0, "U"),
            (1, 0, 0, 1.0, 0.5, "S"), (1, 0, 1, 1.0, None, "V")]
    got = gigpo(rows, omega=1.0, gamma=0.5, fnorm="none")
    # Episode terms: task 0 alone, R = 1; task 1 alone, R = 0.5 (its last step earned 0).
    # Steps from S: returns 0.25 (task 0) and 0.5 (task 1), mean 0.375.
    e0, e1 = 1.0 / (1 + EPS), 0.5 / (1 + EPS)
    expected = [e0 - 0.125 / (1 + EPS), e0, e0, e1 + 0.125 / (1 + EPS), e1]
    assert got == pytest.approx(expected, abs=1e-7)


def test_default_config():
    """Trinity's GiGPOAlgorithm.default_config: eight episodes per task, gigpo's advantage, PPO's loss."""
    preset = ALGORITHM_PRESETS["gigpo"]
    assert (preset["repeat_times"], preset["advantage_fn"], preset["policy_loss_fn"], preset["loss_agg_mode"]) == (
        8, "gigpo", "ppo", "token-mean")
    assert ADVANTAGE_FNS.defaults("gigpo") == {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6}


@pytest.mark.parametrize(("args", "message"), [
    ({"fnorm": "mean"}, "fnorm: unknown normalisation 'mean'"),
    ({"gamma": 1.5}, r"gamma must lie in \[0, 1\]"),
    ({"epsilon": 0}, "epsilon must be > 0"),
    ({"omega": "1"}, "omega must be a number"),
])
def test_bad_arguments_are_named(args, message):
    with pytest.raises(ConfigError, match=message):
        ADVANTAGE_FNS.check("gigpo", args)
    with pytest.raises(ConfigError, match="'step_reward_gamma' not accepted by advantage function 'gigpo'"):
        ADVANTAGE_FNS.check("gigpo", {"step_reward_gamma": 0.9})
