"""Advantage estimators against hand-computed numbers."""

import math
import statistics
from types import SimpleNamespace

import pytest
import torch

from rfthpc.algorithms import ADVANTAGE_FNS
from rfthpc.algorithms.advantages import AdvantageInputs, outcome_token_rewards
from rfthpc.algorithms.aggregation import masked_whiten
from rfthpc.errors import ConfigError


def close(actual, expected, abs=1e-9):
    """Element-wise closeness of nested lists (pytest.approx does not nest)."""
    torch.testing.assert_close(
        torch.tensor(actual, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64), atol=abs, rtol=1e-6
    )


# Seven responses, padded to 3 tokens. Group 0 has four responses (one of them empty), group 1 two
# with equal rewards, group 2 a single response.
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 5.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 2])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 0], [1, 1, 1]])


def batch(**overrides):
    fields = {"rewards": REWARDS, "response_mask": MASK, "group_ids": GROUPS}
    fields.update(overrides)
    return AdvantageInputs(**fields)


def per_sequence(adv):
    """The advantage of each sequence, checking it is constant on response tokens and 0 elsewhere."""
    values = []
    for row, mask in zip(adv.tolist(), MASK.tolist(), strict=True):
        on = {v for v, m in zip(row, mask, strict=True) if m}
        assert len(on) <= 1
        assert all(v == 0.0 for v, m in zip(row, mask, strict=True) if not m)
        values.append(on.pop() if on else None)
    return values


def test_outcome_token_rewards_on_last_response_token():
    mask = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 0, 0]])
    placed = outcome_token_rewards(torch.tensor([2.0, 3.0, 4.0]), mask)
    assert placed.tolist() == [[0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]]


def test_grpo():
    adv, returns, trained = ADVANTAGE_FNS.get("grpo")(batch())
    # group 0 rewards 1,0,0,1: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    expected = [a, -a, -a, None, 0.0, 0.0, 0.0]  # the empty response still counts in group 0's stats
    assert per_sequence(adv) == pytest.approx(expected)
    assert torch.equal(adv, returns)
    assert trained.all()  # without std_threshold every response is trained


@pytest.mark.parametrize(("threshold", "groups"), [
    (None, {0, 1, 2, 3}),
    (0.0, {0, 3}), (1e-4, {0, 3}),  # group 1 (std 0) and the lone response of group 2 leave
    (0.57, {0, 3}), (0.58, {3}),  # group 0's std is sqrt(1/3) = 0.577
    (0.99, {3}), (1.0, set()),  # group 3's is exactly 1: at the threshold it leaves too
])
def test_grpo_std_threshold_leaves_out_the_groups_at_or_below_it(threshold, groups):
    """Trinity-RFT's GRPO std_threshold: a group whose unbiased reward std is <= the threshold, and a
    lone response, are not trained; the others keep the advantages they have without it."""
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 2, 3, 3, 3])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 5.0, 0.0, 1.0, 2.0]),
                             response_mask=torch.ones(10, 2), group_ids=group_ids)
    adv, _, trained = ADVANTAGE_FNS.get("grpo")(inputs, std_threshold=threshold)
    assert trained.tolist() == [int(g) in groups for g in group_ids]
    torch.testing.assert_close(adv, ADVANTAGE_FNS.get("grpo")(inputs)[0])
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert adv[:, 0].tolist() == pytest.approx([a, -a, -a, a, 0, 0, 0, -1 / (1 + 1e-6), 0, 1 / (1 + 1e-6)])


def test_grpo_std_threshold_must_be_a_number():
    with pytest.raises(ConfigError, match="std_threshold must be a number or null for 'grpo', got 'low'"):
        ADVANTAGE_FNS.get("grpo")(batch(), std_threshold="low")


def test_grpo_rank_penalty_follows_trinity_rft():
    """Trinity-RFT 0.6.0's test_grpo_correct_bias: rank_penalty 0.2, rewards 0..3 whose responses' mean
    log-probabilities are 0.1 x reward: the group's mean and std are those of the penalised rewards
    0, 0.95, 1.80, 2.55, each response's own reward stays whole in the numerator (two tasks, interleaved)."""
    rewards = torch.tensor([float(i) for i in range(4) for _ in range(2)])
    group_ids = torch.tensor([j for _ in range(4) for j in range(2)])
    logprobs = torch.tensor([[0.1 * i] * 5 for i in range(4) for _ in range(2)])
    inputs = AdvantageInputs(rewards=rewards, response_mask=torch.ones(8, 5), group_ids=group_ids,
                             behaviour_log_probs=logprobs)
    adv, _, trained = ADVANTAGE_FNS.get("grpo")(inputs, epsilon=1e-7, rank_penalty=0.2)
    penalised = torch.tensor([0.0, 0.95, 1.80, 2.55])
    expected = [(i - penalised.mean().item()) / (penalised.std().item() + 1e-7) for i in range(4) for _ in range(2)]
    close(adv[:, 0].tolist(), expected, abs=1e-5)
    assert trained.all()


def test_grpo_rank_penalty_ranks_within_each_group_by_likelihood():
    """The ranks are places within the group by mean log-probability over the response tokens only,
    not the rewards' order: the least likely response is not penalised, the most likely the most."""
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 1.0, 0.0, 2.0]), response_mask=torch.tensor(
        [[1, 1], [1, 0], [1, 1], [1, 1]]), group_ids=torch.tensor([0, 0, 0, 1]),
        behaviour_log_probs=torch.tensor([[-0.1, -0.1], [-3.0, 99.0], [-1.0, -1.0], [-2.0, -2.0]]))
    adv, _, _ = ADVANTAGE_FNS.get("grpo")(inputs, rank_penalty=0.3)
    # group 0 by likelihood: row 1 (-3, its padding ignored) rank 0, row 2 (-1) rank 1, row 0 (-0.1) rank 2
    penalised = torch.tensor([1.0 * (1 - 0.3 * 2 / 3), 1.0, 0.0])
    mean, std = penalised.mean().item(), penalised.std().item()
    close(adv[:3, 0].tolist(), [(r - mean) / (std + 1e-6) for r in (1.0, 1.0, 0.0)], abs=1e-5)
    assert adv[3].tolist() == [0.0, 0.0]  # a lone response: no contrast


def test_grpo_batch_level_std_follows_trinity_rft():
    """Trinity-RFT 0.6.0's test_batch_level_std_grpo: the mean is the task's, the std the batch's."""
    rewards = torch.tensor([1.0, 2.0, 3.0, 11.0, 12.0, 13.0])
    inputs = AdvantageInputs(rewards=rewards, response_mask=torch.tensor([[1, 1, 1]] * 6),
                             group_ids=torch.tensor([0, 0, 0, 1, 1, 1]))
    adv, returns, _ = ADVANTAGE_FNS.get("grpo")(inputs, epsilon=1e-7, std_cal_level="batch")
    batch_std = rewards.std().item()
    close(adv[:, 0].tolist(), [(r - m) / (batch_std + 1e-7) for r, m in zip(rewards.tolist(), [2.0] * 3 + [12.0] * 3,
                                                                           strict=True)], abs=1e-6)
    assert torch.equal(adv, returns)
    with pytest.raises(ConfigError, match="std_cal_level must be 'group' or 'batch'"):
        ADVANTAGE_FNS.get("grpo")(inputs, std_cal_level="task")


def test_grpo_without_std_normalisation():
    adv, _, _ = ADVANTAGE_FNS.get("grpo")(batch(), std_normalize=False)
    assert per_sequence(adv) == pytest.approx([0.5, -0.5, -0.5, None, 0.0, 0.0, 0.0])


def test_grpo_scores_token_level_rewards_when_given():
    token_rewards = torch.tensor([[0.0, 1.5, 0.5], [0.0, 0.0, 0.0]])  # sums 2 and 0
    inputs = AdvantageInputs(
        rewards=torch.tensor([9.0, 9.0]),
        response_mask=torch.ones(2, 3),
        group_ids=torch.tensor([0, 0]),
        token_level_rewards=token_rewards,
    )
    adv, _, _ = ADVANTAGE_FNS.get("grpo")(inputs)
    a = 1.0 / (math.sqrt(2.0) + 1e-6)  # mean 1, unbiased std sqrt(2)
    assert adv[:, 0].tolist() == pytest.approx([a, -a])


def test_grpo_needs_group_ids():
    with pytest.raises(ConfigError, match="'grpo' compares responses within a task group"):
        ADVANTAGE_FNS.get("grpo")(batch(group_ids=None))


def test_rloo():
    adv, returns = ADVANTAGE_FNS.get("rloo")(batch())
    # reward 1 against the mean of the other three (0, 0, 1): 1 - 1/3; reward 0: 0 - 2/3
    assert per_sequence(adv) == pytest.approx([2 / 3, -2 / 3, -2 / 3, None, 0.0, 0.0, 0.0])
    assert torch.equal(adv, returns)


def test_opmd_mean_baseline():
    adv, _ = ADVANTAGE_FNS.get("opmd")(batch())
    assert per_sequence(adv) == pytest.approx([0.5, -0.5, -0.5, None, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_opmd_logavgexp_baseline(tau):
    adv, _ = ADVANTAGE_FNS.get("opmd")(batch(), opmd_baseline="logavgexp", tau=tau)
    # b = tau * log((e^{1/tau} + e^0 + e^0 + e^{1/tau}) / 4) = tau * log((e^{1/tau} + 1) / 2)
    b = tau * math.log((math.exp(1 / tau) + 1) / 2)
    # group 1 (rewards 1, 1): b = tau * log(e^{1/tau}) = 1, so advantage 0
    assert per_sequence(adv) == pytest.approx([1 - b, -b, -b, None, 0.0, 0.0, 0.0])


def test_opmd_logavgexp_large_rewards_stay_finite():
    inputs = AdvantageInputs(
        rewards=torch.tensor([1000.0, 998.0], dtype=torch.float64),
        response_mask=torch.ones(2, 1),
        group_ids=torch.tensor([0, 0]),
    )
    adv, _ = ADVANTAGE_FNS.get("opmd")(inputs, opmd_baseline="logavgexp", tau=0.1)
    # b = 1000 + 0.1 * log((1 + e^{-20}) / 2)
    b = 1000 + 0.1 * math.log((1 + math.exp(-20)) / 2)
    assert adv.flatten().tolist() == pytest.approx([1000 - b, 998 - b])


def test_opmd_unknown_baseline():
    with pytest.raises(ConfigError, match="mean, logavgexp"):
        ADVANTAGE_FNS.get("opmd")(batch(), opmd_baseline="median")


def test_reinforce_is_the_reward():
    adv, _ = ADVANTAGE_FNS.get("reinforce")(batch())
    assert per_sequence(adv) == [1.0, 0.0, 0.0, None, 1.0, 1.0, 5.0]


def test_reinforce_plus_plus_discounts_and_whitens():
    token_rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 7.0]])  # the 7 sits past EOS
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    inputs = AdvantageInputs(rewards=torch.zeros(2), response_mask=mask, token_level_rewards=token_rewards)
    adv, returns = ADVANTAGE_FNS.get("reinforceplusplus")(inputs, gamma=0.5)
    # row 0: 1, then 0 + 0.5 * 1, then 0 + 0.5 * 0.5; row 1 ignores the masked 7
    close(returns.tolist(), [[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]])
    kept = [0.25, 0.5, 1.0, 1.0, 2.0]
    mean, std = statistics.mean(kept), statistics.stdev(kept)
    expected = [[(x - mean) / std for x in kept[:3]], [(x - mean) / std for x in kept[3:]] + [0.0]]
    close(adv.tolist(), expected, abs=1e-6)


def test_reinforce_plus_plus_carries_the_return_over_a_tools_output():
    """A multi-turn response: the masked tokens between its turns (a tool's output) do not cut the return,
    so the first turn shares the outcome (Trinity-RFT's reinforce++ advantage)."""
    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1]])
    adv, returns = ADVANTAGE_FNS.get("reinforceplusplus")(AdvantageInputs(rewards=torch.tensor([1.0, 0.0]),
                                                                         response_mask=mask))
    close(returns.tolist(), [[1, 1, 0, 0, 1, 1], [0] * 6])
    # whitened over the ten response tokens: mean 0.4, unbiased std sqrt(2.4 / 9)
    a, b = 0.6 / math.sqrt(2.4 / 9), -0.4 / math.sqrt(2.4 / 9)
    close(adv.tolist(), [[a, a, 0, 0, a, a], [b] * 6], abs=1e-5)


def test_reinforce_plus_plus_from_sequence_rewards():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 2.0]), response_mask=mask)
    _, returns = ADVANTAGE_FNS.get("reinforce++")(inputs, gamma=0.5)
    close(returns.tolist(), [[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]])


def test_reinforce_plus_plus_does_not_discount_across_a_hole():
    """A tool's output between turns (mask 0) is not a step of the policy: the return crosses it
    undiscounted (veRL 0.9.1; Trinity-RFT would give 0.125 at t=0, discounting at t=1 too)."""
    mask = torch.tensor([[1, 0, 1, 1]])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0]), response_mask=mask)
    _, returns = ADVANTAGE_FNS.get("reinforce++")(inputs, gamma=0.5)
    close(returns.tolist(), [[0.25, 0.0, 0.5, 1.0]])


def test_ppo_gae():
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0]), response_mask=torch.ones(1, 3), values=torch.tensor([[0.5, 0.6, 0.7]])
    )
    adv, returns = ADVANTAGE_FNS.get("ppo")(inputs, gamma=0.9, lam=0.5)
    # delta_2 = 1 - 0.7 = 0.3;            A_2 = 0.3
    # delta_1 = 0.9 * 0.7 - 0.6 = 0.03;   A_1 = 0.03 + 0.45 * 0.3 = 0.165
    # delta_0 = 0.9 * 0.6 - 0.5 = 0.04;   A_0 = 0.04 + 0.45 * 0.165 = 0.11425
    raw = [0.11425, 0.165, 0.3]
    close(returns.tolist(), [[0.61425, 0.765, 1.0]])
    mean, var = statistics.mean(raw), statistics.variance(raw)
    close(adv.tolist(), [[(a - mean) / math.sqrt(var + 1e-8) for a in raw]], abs=1e-6)


def test_ppo_gae_skips_masked_tokens():
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0]),
        response_mask=torch.tensor([[1, 0, 1]]),  # the middle token is tool output, not the policy's
        values=torch.tensor([[0.5, 0.6, 0.7]]),
    )
    adv, returns = ADVANTAGE_FNS.get("gae")(inputs, gamma=0.9, lam=0.5)
    # A_2 = 1 - 0.7 = 0.3; token 1 is skipped, so A_0 = (0.9 * 0.7 - 0.5) + 0.45 * 0.3 = 0.265
    assert returns[0, 0].item() == pytest.approx(0.265 + 0.5)
    assert returns[0, 2].item() == pytest.approx(1.0)
    # 0.265 and 0.3: mean 0.2825, unbiased variance 2 * 0.0175^2, whitened with eps 1e-8
    w = 0.0175 / math.sqrt(2 * 0.0175**2 + 1e-8)
    close(adv.tolist(), [[-w, 0.0, w]], abs=1e-6)


def test_ppo_needs_values():
    with pytest.raises(ConfigError, match="needs critic values"):
        ADVANTAGE_FNS.get("ppo")(batch())


@pytest.mark.parametrize("name", ["grpo", "rloo", "opmd", "reinforce", "reinforceplusplus"])
def test_all_empty_batch_gives_zeros_not_nan(name):
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 0.0]), response_mask=torch.zeros(2, 2), group_ids=torch.tensor([0, 0])
    )
    adv, _ = ADVANTAGE_FNS.get(name)(inputs)[:2]
    assert adv.tolist() == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("name", ["grpo", "rloo", "opmd"])
@pytest.mark.parametrize("reward", [0.1, 0.7, 1 / 3])
def test_equal_rewards_give_exact_zeros_despite_rounding(name, reward):
    # the float32 mean of seven equal 0.1s is not exactly 0.1; unguarded, grpo would give -0.0074
    inputs = AdvantageInputs(
        rewards=torch.full((7,), reward), response_mask=torch.ones(7, 2), group_ids=torch.zeros(7, dtype=torch.long)
    )
    adv, _ = ADVANTAGE_FNS.get(name)(inputs)[:2]
    assert adv.abs().max().item() == 0.0


# ---- the group estimators of group_advantages -------------------------------------------------------------------

NEEDS_FORWARD = {"old_log_probs": torch.log(torch.full((7, 3), 0.5)), "sum_pi_squared": torch.full((7, 3), 0.3),
                 "behaviour_log_probs": torch.log(torch.full((7, 3), 0.4)), "entropy": torch.full((7, 3), 1.2)}
"""What optimal_token_baseline and clipb read of the policies: pi(y_t) = 0.5, sum_v pi_v^2 = 0.3 from the trainer's
forward pass, mu(y_t) = 0.4 from the explorer, entropy 1.2."""


def test_opo_weights_the_baseline_by_length():
    adv, returns = ADVANTAGE_FNS.get("opo")(batch())
    # group 0: lengths 3, 2, 1, 0 and rewards 1, 0, 0, 1: b = (3 * 1 + 0 + 0 + 0 * 1) / 6 = 0.5
    assert per_sequence(adv) == pytest.approx([0.5, -0.5, -0.5, None, 0.0, 0.0, 0.0])
    assert torch.equal(adv, returns)


def test_opo_length_weighting_differs_from_the_plain_mean():
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 0.0, 0.0]), response_mask=torch.tensor([[1, 1, 1, 1]] + [[1, 0, 0, 0]] * 2),
                             group_ids=torch.tensor([4, 4, 4]))
    adv, _ = ADVANTAGE_FNS.get("opo")(inputs)
    # b = (4 * 1) / (4 + 1 + 1) = 2/3 (the plain mean would be 1/3)
    assert adv[:, 0].tolist() == pytest.approx([1 / 3, -2 / 3, -2 / 3])


def test_gpg_scales_by_the_share_of_rewarded_responses():
    adv, _ = ADVANTAGE_FNS.get("gpg")(batch(), f_norm=2.0)
    # 5 of the 7 rewards are nonzero: alpha = 7 / 5; group 0: (R - 0.5) * alpha / 2
    a = 0.5 * 7 / 5 / 2
    assert per_sequence(adv) == pytest.approx([a, -a, -a, None, 0.0, 0.0, 0.0])


def test_gpg_all_zero_rewards_give_zeros():
    inputs = AdvantageInputs(rewards=torch.zeros(4), response_mask=torch.ones(4, 2), group_ids=torch.tensor([0, 0, 1, 1]))
    assert ADVANTAGE_FNS.get("gpg")(inputs)[0].abs().max().item() == 0.0


def test_gpg_rejects_a_non_positive_f_norm():
    with pytest.raises(ConfigError, match="advantage_fn_args.f_norm"):
        ADVANTAGE_FNS.get("gpg")(batch(), f_norm=0.0)


def test_grpo_passk_rewards_only_the_best_of_each_group():
    inputs = AdvantageInputs(rewards=torch.tensor([0.2, 0.9, 0.5, 1.0, 1.0, 0.0]), response_mask=torch.ones(6, 2),
                             group_ids=torch.tensor([5, 5, 5, 8, 8, 8]))
    adv, _ = ADVANTAGE_FNS.get("grpo_passk")(inputs, std_normalize=False)
    # group 5: the best (0.9) gets 0.9 - 0.5; group 8: two tie for best, so the margin is 0
    assert adv[:, 0].tolist() == pytest.approx([0.0, 0.4, 0.0, 0.0, 0.0, 0.0])
    adv, _ = ADVANTAGE_FNS.get("grpo_passk")(inputs)
    std = statistics.stdev([0.2, 0.9, 0.5])
    assert adv[:, 0].tolist() == pytest.approx([0.0, 0.4 / (std + 1e-6), 0.0, 0.0, 0.0, 0.0])


def test_reinforce_plus_plus_baseline_whitens_the_group_centred_reward():
    adv, returns = ADVANTAGE_FNS.get("reinforce_plus_plus_baseline")(batch())
    # group-centred: 0.5, -0.5, -0.5, (empty), 0, 0, 0 on 3 + 2 + 1 + 0 + 2 + 1 + 3 = 12 tokens
    tokens = [0.5] * 3 + [-0.5] * 2 + [-0.5] + [0.0] * 6
    mean, std = statistics.mean(tokens), statistics.stdev(tokens)
    w = [(x - mean) / math.sqrt(std**2 + 1e-8) for x in (0.5, -0.5, -0.5, 0.0)]
    assert per_sequence(adv) == pytest.approx([w[0], w[1], w[2], None, w[3], w[3], w[3]])
    assert torch.equal(adv, returns)


def test_lite_ppo_uses_the_group_mean_and_the_batch_std():
    adv, returns, _ = ADVANTAGE_FNS.get("lite_ppo")(batch())
    std = statistics.stdev(REWARDS.tolist())  # over the batch's seven responses
    a = 0.5 / (std + 1e-6)
    assert per_sequence(adv) == pytest.approx([a, -a, -a, None, 0.0, 0.0, 0.0])
    assert torch.equal(adv, returns)


@pytest.mark.parametrize(("mean_type", "std_type"), [("batch", "batch"), ("batch", None), (None, None), ("group", None)])
def test_lite_ppo_takes_rolls_normalisation_levels(mean_type, std_type):
    adv, *_ = ADVANTAGE_FNS.get("lite_ppo")(batch(), norm_mean_type=mean_type, norm_std_type=std_type)
    r = REWARDS.tolist()
    if mean_type == "batch":
        expected = [x - statistics.mean(r) for x in r]
    elif mean_type == "group":
        expected = [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0]
    else:
        expected = r
    if std_type == "batch":
        expected = [x / (statistics.stdev(r) + 1e-6) for x in expected]
    expected[3] = None  # the empty response
    assert per_sequence(adv) == pytest.approx(expected)


def test_lite_ppo_group_levels_are_grpo():
    lite, *_ = ADVANTAGE_FNS.get("lite_ppo")(batch(), norm_mean_type="group", norm_std_type="group")
    torch.testing.assert_close(lite, ADVANTAGE_FNS.get("grpo")(batch())[0])


def test_lite_ppo_follows_rolls_clips_and_whitening():
    # Raw rewards (ROLL's reinforce without normalisation), clipped at 2: group 2's 5 becomes 2.
    clipped, *_ = ADVANTAGE_FNS.get("lite_ppo")(batch(), norm_mean_type=None, norm_std_type=None, reward_clip=2.0)
    assert per_sequence(clipped) == pytest.approx([1.0, 0.0, 0.0, None, 1.0, 1.0, 2.0])
    # Then whitened over the batch's response tokens (each response weighs by its length) and clipped at 1.
    adv, returns, _ = ADVANTAGE_FNS.get("lite_ppo")(batch(), norm_mean_type=None, norm_std_type=None, reward_clip=2.0,
                                                 whiten_advantages=True, advantage_clip=1.0)
    per_response = [1.0, 0.0, 0.0, None, 1.0, 1.0, 2.0]
    tokens = [v for v, row in zip(per_response, MASK.tolist(), strict=True) for _ in range(sum(row))]
    mean, var = statistics.mean(tokens), statistics.variance(tokens)
    expected = [None if v is None else max(-1.0, min(1.0, (v - mean) / math.sqrt(var + 1e-8))) for v in per_response]
    assert per_sequence(adv) == pytest.approx(expected)
    assert expected[-1] == 1.0 and expected[1] < -1 + 1e-9  # both clips bind here
    assert torch.equal(adv, returns)
    with pytest.raises(ConfigError, match="advantage_fn_args.advantage_clip must be > 0"):
        ADVANTAGE_FNS.get("lite_ppo")(batch(), advantage_clip=0)


def test_lite_ppo_masks_are_rolls_difficulty_and_max_len_masks():
    """Group means 0.5, 1.0 and 5.0 (a lone response); ROLL keeps a group whose mean lies strictly inside
    (0.1, 0.95), and a response not cut at the token limit (here the second)."""
    lite = ADVANTAGE_FNS.get("lite_ppo")
    truncated = torch.tensor([False, True, False, False, False, False, False])
    plain, _, kept = lite(batch(truncated=truncated))
    assert kept.tolist() == [True] * 7  # both masks off
    adv, _, kept = lite(batch(truncated=truncated), difficulty_mask=True)
    assert kept.tolist() == [True, True, True, True, False, False, True]  # group 1 (mean 1.0) is too easy
    assert torch.equal(adv, plain)  # the advantages are the batch's, masked or not
    _, _, kept = lite(batch(truncated=truncated), max_len_mask=True)
    assert kept.tolist() == [True, False, True, True, True, True, True]
    _, _, kept = lite(batch(truncated=truncated), difficulty_mask=True, max_len_mask=True,
                      difficulty_low_threshold=0.6, difficulty_high_threshold=1.5)
    assert kept.tolist() == [False, False, False, False, True, True, True]  # group 0 (mean 0.5) is too hard
    with pytest.raises(ConfigError, match="max_len_mask needs the responses' token limit"):
        lite(batch(), max_len_mask=True)
    with pytest.raises(ConfigError, match=r"difficulty_low_threshold \(0.9\) must be below"):
        lite(batch(), difficulty_mask=True, difficulty_low_threshold=0.9, difficulty_high_threshold=0.5)


def test_lite_ppo_rejects_running_statistics():
    with pytest.raises(ConfigError, match="advantage_fn_args.norm_std_type: unknown level 'running'"):
        ADVANTAGE_FNS.get("lite_ppo")(batch(), norm_std_type="running")


def test_gdpo_normalises_each_component_within_its_group():
    # group 1's accuracy is equal (no contrast) but its format differs: GDPO still trains on the format
    components = {"accuracy": torch.tensor([1.0, 0, 0, 1, 1, 1, 1]), "format": torch.tensor([0.0, 0, 0, 0, 1, 0, 1])}
    adv, _ = ADVANTAGE_FNS.get("gdpo")(batch(reward_components=components), epsilon=0.0)
    a = 0.5 / math.sqrt(1 / 3)  # group 0's accuracy, as in test_grpo
    f = 0.5 / math.sqrt(0.5)    # group 1's format: mean 0.5, unbiased std sqrt(0.5)
    per_token = [a] * 3 + [-a] * 2 + [-a] + [f] * 2 + [-f] + [0.0] * 3
    mean, std = statistics.mean(per_token), statistics.stdev(per_token)
    w = [(x - mean) / math.sqrt(std**2 + 1e-8) for x in (a, -a, -a, f, -f, 0.0)]
    assert per_sequence(adv) == pytest.approx([w[0], w[1], w[2], None, w[3], w[4], w[5]])


def test_gdpo_without_components_whitens_grpo():
    gdpo, _ = ADVANTAGE_FNS.get("gdpo")(batch())
    grpo, _, _ = ADVANTAGE_FNS.get("grpo")(batch())
    expected = masked_whiten(grpo, MASK) * MASK
    torch.testing.assert_close(gdpo, expected)


def test_gdpo_names_a_missing_component():
    with pytest.raises(ConfigError, match=r"reward_keys names \['format'\].*\['accuracy'\]"):
        ADVANTAGE_FNS.get("gdpo")(batch(reward_components={"accuracy": REWARDS}), reward_keys=["accuracy", "format"])


@pytest.mark.parametrize("args", [{"reward_weights": [1.0]}, {"reward_keys": ["accuracy"], "reward_weights": [1.0, 2.0]},
                                  {"reward_keys": "accuracy"}])
def test_gdpo_rejects_bad_keys_and_weights(args):
    with pytest.raises(ConfigError, match="algorithm.advantage_fn_args.reward_"):
        ADVANTAGE_FNS.get("gdpo")(batch(reward_components={"accuracy": REWARDS}), **args)


def test_optimal_token_baseline_by_hand():
    # one group of two responses of two tokens; the second's first token is a tool's output
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 0.0]), response_mask=torch.tensor([[1, 1], [0, 1]]), group_ids=torch.tensor([3, 3]),
        old_log_probs=torch.log(torch.tensor([[0.5, 0.25], [0.9, 0.5]])),
        sum_pi_squared=torch.tensor([[0.5, 0.25], [0.0, 0.5]]),
    )
    adv, returns = ADVANTAGE_FNS.get("optimal_token_baseline")(inputs, epsilon=0.0)
    # w = 1 - 2 pi + sum pi^2: row 0: 0.5, 0.75 -> W = 0.5, 1.25; row 1: (masked), 0.5 -> W = 0, 0.5
    # t = 0: only row 0 -> B = 1; t = 1: B = (1 * 1.25 + 0 * 0.5) / 1.75
    b1 = 1.25 / 1.75
    close(returns.tolist(), [[1.0, 1.0], [0.0, 0.0]])
    # row 0 is the single longest (2 tokens, the other 1): its positions >= 1 get B = 0
    close(adv.tolist(), [[0.0, 1.0], [0.0, -b1]])
    adv, _ = ADVANTAGE_FNS.get("optimal_token_baseline")(inputs, epsilon=0.0, handle_zero_tail=False)
    close(adv.tolist(), [[0.0, 1 - b1], [0.0, -b1]])


def test_optimal_token_baseline_scales_each_tokens_weight_by_its_squared_rollout_is_weight():
    # veRL: under rollout correction, w_t -> w_t rho_t^2, so B_t = sum G rho^2 W / sum rho^2 W
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 0.0]), response_mask=torch.tensor([[1, 1], [1, 1]]), group_ids=torch.tensor([3, 3]),
        old_log_probs=torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]])),
        sum_pi_squared=torch.tensor([[0.5, 0.25], [0.5, 0.5]]),
        rollout_is_weights=torch.tensor([[2.0, 1.0], [1.0, 0.5]]),
    )
    adv, _ = ADVANTAGE_FNS.get("optimal_token_baseline")(inputs, epsilon=0.0)
    # w: row 0: 0.5 * 4, 0.75 * 1 -> W = 2, 2.75; row 1: 0.5 * 1, 0.5 * 0.25 -> W = 0.5, 0.625
    b0, b1 = 2 / 2.5, 2.75 / 3.375
    close(adv.tolist(), [[1 - b0, 1 - b1], [-b0, -b1]])


def test_the_trainer_gives_an_advantage_the_rollout_is_weights_only_when_rollout_is_is_on():
    from rfthpc.algorithms.rollout_settings import RolloutCorrection
    from rfthpc.trainer.rl_batch import _advantage_is_weights

    start, behaviour = torch.log(torch.tensor([[0.5, 0.2]])), torch.log(torch.tensor([[0.25, 0.4]]))
    mask = torch.tensor([[True, True]])
    alg = SimpleNamespace(advantage_needs=ADVANTAGE_FNS.needs("optimal_token_baseline"),
                          rollout=RolloutCorrection("token", is_upper=1.5))
    close(_advantage_is_weights(alg, start, behaviour, mask).tolist(), [[1.5, 0.5]])  # 2 truncated at 1.5
    alg.rollout = RolloutCorrection()
    assert _advantage_is_weights(alg, start, behaviour, mask) is None
    alg = SimpleNamespace(advantage_needs=ADVANTAGE_FNS.needs("grpo"),
                          rollout=RolloutCorrection("token"))
    assert _advantage_is_weights(alg, start, behaviour, mask) is None


def test_optimal_token_baseline_needs_the_forward_outputs():
    with pytest.raises(ConfigError, match="sum_pi_squared from the trainer's forward pass"):
        ADVANTAGE_FNS.get("optimal_token_baseline")(batch())


# Clip_B's batch: groups of two (rewards 1, 0) and one (reward 5, one token); every token has behaviour
# probability 1/e, so S = (H - 1) / e, and its entropies give S * e = 0, 0, -3 | 0, -3, 1 | 0. The lone
# response's padding holds NaN, which must reach nothing.
CLIPB = AdvantageInputs(
    rewards=torch.tensor([1.0, 0.0, 5.0]), response_mask=torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 0]]),
    group_ids=torch.tensor([0, 0, 1]), behaviour_log_probs=torch.full((3, 3), -1.0),
    entropy=torch.tensor([[1.0, 1.0, -2.0], [1.0, -2.0, 2.0], [1.0, math.nan, math.nan]]))


@pytest.mark.parametrize(("mu", "dropped"), [(1.0, [(1, 1)]), (1.5, [(1, 1)]), (2.5, [])])
def test_clipb_by_hand(mu, dropped):
    signal = [0, 0, -3, 0, -3, 1, 0]  # S * e over the response tokens: mean -5/7, population std 1.4846
    threshold = statistics.mean(signal) - mu * statistics.pstdev(signal)
    assert (threshold > -3) == bool(dropped)  # -2.199 and -2.941 are above the -3 tokens, -4.426 below
    adv, returns, kept = ADVANTAGE_FNS.get("clipb")(CLIPB, mu=mu)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    close(adv.tolist(), [[a] * 3, [-a] * 3, [0.0, 0.0, 0.0]])
    assert torch.equal(adv, returns)
    # the -3 token of the positive response stays; the negative response's -3 goes below the threshold
    expected = CLIPB.response_mask.bool().clone()
    for row, col in dropped:
        expected[row, col] = False
    assert torch.equal(kept, expected)


def test_clipb_keeps_everything_when_the_signal_is_flat():
    flat = AdvantageInputs(rewards=torch.tensor([1.0, 0.0]), response_mask=torch.ones(2, 2),
                           group_ids=torch.tensor([0, 0]), behaviour_log_probs=torch.full((2, 2), -1.0),
                           entropy=torch.ones(2, 2))
    assert ADVANTAGE_FNS.get("clipb")(flat, mu=0.0)[2].all()


def test_clipb_needs_the_entropy_and_a_sensible_mu():
    with pytest.raises(ConfigError, match="'clipb' needs the behaviour log-probabilities and the policy's entropy"):
        ADVANTAGE_FNS.get("clipb")(batch())
    with pytest.raises(ConfigError, match="advantage_fn_args.mu must be a finite number >= 0"):
        ADVANTAGE_FNS.get("clipb")(CLIPB, mu=-1.0)


GROUP_ESTIMATORS = ["grpo", "rloo", "opmd", "opo", "gpg", "grpo_passk", "reinforce_plus_plus_baseline", "gdpo",
                    "lite_ppo", "optimal_token_baseline", "tir_optimal_token_baseline", "clipb", "rec"]


@pytest.mark.parametrize("name", GROUP_ESTIMATORS + ["asymre", "reinforce", "reinforceplusplus"])
def test_every_estimator_gives_zeros_for_an_empty_batch(name):
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 0.0]), response_mask=torch.zeros(2, 3),
                             group_ids=torch.tensor([0, 0]), **{k: v[:2] for k, v in NEEDS_FORWARD.items()})
    adv, returns = ADVANTAGE_FNS.get(name)(inputs)[:2]
    assert adv.tolist() == [[0.0] * 3] * 2
    assert returns.tolist() == [[0.0] * 3] * 2


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
@pytest.mark.parametrize("reward", [0.1, 1 / 3])
def test_every_group_estimator_gives_exact_zeros_without_contrast(name, reward):
    # seven equal rewards (their float32 mean is not exactly 0.1) and a lone response
    inputs = AdvantageInputs(rewards=torch.tensor([reward] * 7 + [5.0]), response_mask=torch.ones(8, 3),
                             group_ids=torch.tensor([2] * 7 + [9]),
                             **{k: torch.cat([v, v[:1]]) for k, v in NEEDS_FORWARD.items()})
    adv, _ = ADVANTAGE_FNS.get(name)(inputs)[:2]
    assert adv.abs().max().item() == 0.0


@pytest.mark.parametrize("name", GROUP_ESTIMATORS + ["asymre"])
def test_group_estimators_ignore_token_rewards_outside_the_mask(name):
    token_rewards = outcome_token_rewards(REWARDS, MASK)
    clean = ADVANTAGE_FNS.get(name)(batch(token_level_rewards=token_rewards, **NEEDS_FORWARD))
    poisoned = torch.where(MASK.bool(), token_rewards, torch.nan)
    dirty = ADVANTAGE_FNS.get(name)(batch(token_level_rewards=poisoned, **NEEDS_FORWARD))
    for a, b in zip(clean, dirty, strict=True):
        assert torch.equal(a, b)


def test_asymre_shifts_the_group_mean():
    adv, returns = ADVANTAGE_FNS.get("asymre")(batch())
    # group 0: baseline 0.5 - 0.1 = 0.4; group 1 (equal rewards): -shift = 0.1; group 2 (alone): 0
    assert per_sequence(adv) == pytest.approx([0.6, -0.4, -0.4, None, 0.1, 0.1, 0.0])
    assert torch.equal(adv, returns)
    adv, _ = ADVANTAGE_FNS.get("asymre")(batch(), baseline_shift=0.25)
    assert per_sequence(adv) == pytest.approx([0.25, -0.75, -0.75, None, -0.25, -0.25, 0.0])


@pytest.mark.parametrize("reward", [0.1, 1 / 3])
def test_asymre_equal_rewards_give_exactly_minus_the_shift(reward):
    # the float32 mean of seven equal rewards is not exactly the reward: no trace of it may remain
    inputs = AdvantageInputs(rewards=torch.tensor([reward] * 7 + [5.0]), response_mask=torch.ones(8, 3),
                             group_ids=torch.tensor([2] * 7 + [9]))
    adv, _ = ADVANTAGE_FNS.get("asymre")(inputs, baseline_shift=-0.1)
    assert adv[:7].unique().tolist() == [torch.tensor(0.1).item()]
    assert adv[7].abs().max().item() == 0.0


def test_asymre_follows_a_mask_with_holes():
    mask = torch.tensor([[1, 0, 1], [0, 1, 1]])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 0.0]), response_mask=mask, group_ids=torch.tensor([0, 0]))
    adv, _ = ADVANTAGE_FNS.get("asymre")(inputs)
    close(adv.tolist(), [[0.6, 0.0, 0.6], [0.0, -0.4, -0.4]])


@pytest.mark.parametrize("shift", [float("nan"), "low", True])
def test_asymre_rejects_a_shift_that_is_not_a_finite_number(shift):
    with pytest.raises(ConfigError, match="baseline_shift must be a finite number"):
        ADVANTAGE_FNS.get("asymre")(batch(), baseline_shift=shift)


def test_rec_centres_on_the_group_mean():
    adv, returns = ADVANTAGE_FNS.get("rec")(batch())
    assert per_sequence(adv) == pytest.approx([0.5, -0.5, -0.5, None, 0.0, 0.0, 0.0])
    assert torch.equal(adv, returns)
    # population std of (1, 0, 0, 1) is 0.5
    adv, _ = ADVANTAGE_FNS.get("rec")(batch(), std_normalize=True, epsilon=0.5)
    assert per_sequence(adv) == pytest.approx([0.5, -0.5, -0.5, None, 0.0, 0.0, 0.0])
    adv, _ = ADVANTAGE_FNS.get("rec")(batch(), std_normalize=True)
    assert per_sequence(adv) == pytest.approx([1.0, -1.0, -1.0, None, 0.0, 0.0, 0.0], abs=1e-5)


# group 0: one response at or above its mean 0.25, three below; group 1: (2, 1) at or above 1, one below;
# group 2 alone. The last response's mask has a hole.
BALANCE = AdvantageInputs(rewards=torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 1.0, 0.0, 3.0]),
                          response_mask=torch.tensor([[1, 1]] * 7 + [[1, 0]]),
                          group_ids=torch.tensor([0, 0, 0, 0, 1, 1, 1, 2]))


@pytest.mark.parametrize("std_normalize", [False, True])
def test_rec_balance_drops_the_surplus_negatives(std_normalize):
    kept_negatives = set()
    for seed in range(20):
        torch.manual_seed(seed)
        adv, _ = ADVANTAGE_FNS.get("rec")(BALANCE, drop="balance", std_normalize=std_normalize, epsilon=0.0)
        seq = adv[:, 0].tolist()
        # kept in group 0: the positive and one negative, mean 0.5 (population std 0.5)
        scale = 2.0 if std_normalize else 1.0
        assert seq[0] == pytest.approx(0.5 * scale)
        assert sorted(seq[1:4]) == pytest.approx([-0.5 * scale, 0.0, 0.0])
        kept_negatives.add(1 + [abs(v) > 0 for v in seq[1:4]].index(True))
        # group 1 has no surplus: (2, 1, 0) - 1, over the population std sqrt(2/3)
        expected = [1.0, 0.0, -1.0] if not std_normalize else [v / math.sqrt(2 / 3) for v in (1.0, 0.0, -1.0)]
        assert seq[4:7] == pytest.approx(expected)
        assert adv[7].tolist() == [0.0, 0.0]
    # the negative kept is drawn at random
    assert len(kept_negatives) > 1


@pytest.mark.parametrize(("args", "match"), [({"drop": "random"}, "drop: 'random' is not a 'rec' choice"),
                                             ({"epsilon": -1.0}, "epsilon must be >= 0")])
def test_rec_rejects_bad_arguments(args, match):
    with pytest.raises(ConfigError, match=match):
        ADVANTAGE_FNS.get("rec")(batch(), **args)


def test_raft_keeps_each_groups_best_responses():
    # rewards 1, 0, 0, 1 | 1, 1 | 5 in groups 0 | 1 | 2; ties go to the earlier response
    adv, returns, kept = ADVANTAGE_FNS.get("raft")(batch())
    assert kept.tolist() == [True, False, False, False, True, False, True]
    assert per_sequence(adv) == [1.0, 0.0, 0.0, None, 1.0, 0.0, 1.0] and torch.equal(adv, returns)  # row 3: empty
    _, _, kept = ADVANTAGE_FNS.get("raft")(batch(), top_k=2)
    assert kept.tolist() == [True, False, False, True, True, True, True]
    # min_reward: a group's best is still dropped below it (group 0 at 0.5 keeps only its 1s)
    rewards = torch.tensor([0.5, 0.0, 0.0, 0.25, 1.0, 0.0, 5.0])
    _, _, kept = ADVANTAGE_FNS.get("raft")(batch(rewards=rewards), top_k=2, min_reward=0.5)
    assert kept.tolist() == [True, False, False, False, True, False, True]


@pytest.mark.parametrize(("args", "message"), [({"top_k": 0}, "top_k must be a whole number >= 1"),
                                               ({"min_reward": "high"}, "min_reward must be a number or null")])
def test_raft_refuses_bad_arguments(args, message):
    with pytest.raises(ConfigError, match=message):
        ADVANTAGE_FNS.get("raft")(batch(), **args)
