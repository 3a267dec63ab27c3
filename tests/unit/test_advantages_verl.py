"""Advantage estimators against veRL 0.9.1 (`verl/trainer/ppo/core_algos.py`) on the same inputs.

The expected values were produced by running veRL 0.9.1's functions (named at each test) on the
literal inputs below, in float32, with uid strings "u<group id>" as `index`. rfthpc never imports
veRL: the numbers are copied here. Where rfthpc differs on purpose (a group without contrast gets 0;
veRL gives a lone response its reward), the test shows the difference.

The batch: ten responses padded to 5 tokens, in groups with non-contiguous ids 7, 3, 42, 9:
  group 7:  a full response, a one-token response, one with a hole (tool output), a fully padded row
  group 3:  two responses with equal rewards (no contrast)
  group 42: a lone response (no contrast)
  group 9:  three responses, one with holes
"""

import pytest
import torch

from rfthpc.algorithms import ADVANTAGE_FNS
from rfthpc.algorithms.advantages import AdvantageInputs

MASK = torch.tensor([
    [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 1], [0, 0, 0, 0, 0], [1, 1, 1, 0, 0],
    [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 0, 1, 1, 0], [1, 1, 0, 0, 0],
])
GROUPS = torch.tensor([7, 7, 7, 7, 3, 3, 42, 9, 9, 9])
REWARDS = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.7, 0.7, 2.0, 0.0, 3.0, 1.0])
# The rewards on each row's last response token (veRL's token_level_rewards; a row of no token gets none).
OUTCOME = torch.tensor([
    [0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0.5], [0, 0, 0, 0, 0], [0, 0, 0.7, 0, 0],
    [0, 0.7, 0, 0, 0], [0, 0, 0, 2.0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 3.0, 0], [0, 1.0, 0, 0, 0],
])
# OUTCOME minus a per-token penalty 0.01 * (t + 1) on response tokens, as a KL penalty shapes it.
SHAPED = torch.where(MASK.bool(), OUTCOME - 0.01 * torch.arange(1, 6), torch.zeros(5))
LONE = 6
"""The row of the lone response (group 42)."""


def inputs(token_level_rewards=OUTCOME, mask=MASK, **fields):
    return AdvantageInputs(rewards=REWARDS, response_mask=mask, token_level_rewards=token_level_rewards,
                           group_ids=GROUPS, **fields)


def close(actual, expected):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float32),
                               torch.as_tensor(expected, dtype=torch.float32), rtol=1e-5, atol=1e-6)


def per_sequence(adv, mask=MASK):
    """Each row's advantage, checking it is one value on its response tokens and 0 elsewhere (None: no token)."""
    out = []
    for row, m in zip(adv, mask.bool(), strict=True):
        assert torch.all(row[~m] == 0)
        assert row[m].numel() == 0 or torch.all(row[m] == row[m][0])
        out.append(row[m][0].item() if m.any() else None)
    return out


def check_sequences(adv, expected, skip=()):
    got = per_sequence(adv)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if i in skip:
            continue
        assert (g is None) == (e is None), i
        if e is not None:
            close(g, e)


# ---- outcome estimators ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("std_normalize", "expected"), [
    # compute_grpo_outcome_advantage(OUTCOME, MASK, index, norm_adv_by_std_in_grpo=True)
    (True, [1.30557966, -0.78334779, 0.26111594, None, 0.0, 0.0, 1.99999809, -0.87287104, 1.09108877, -0.21821779]),
    # ... norm_adv_by_std_in_grpo=False
    (False, [0.625, -0.375, 0.125, None, 0.0, 0.0, 2.0, -1.33333337, 1.66666663, -0.33333337]),
])
def test_grpo_matches_verl(std_normalize, expected):
    adv, returns, _ = ADVANTAGE_FNS.get("grpo")(inputs(), std_normalize=std_normalize)
    check_sequences(adv, expected, skip=(LONE,))
    assert per_sequence(adv)[LONE] == 0.0  # veRL: R / (1 + epsilon)
    assert torch.equal(adv, returns)


def test_rloo_matches_verl():
    # compute_rloo_outcome_advantage(OUTCOME, MASK, index)
    expected = [0.83333337, -0.5, 0.16666669, None, 0.0, 0.0, 2.0, -2.0, 2.5, -0.5]
    adv, returns = ADVANTAGE_FNS.get("rloo")(inputs())
    check_sequences(adv, expected, skip=(LONE,))
    assert per_sequence(adv)[LONE] == 0.0  # veRL: R
    assert torch.equal(adv, returns)


def test_opo_matches_verl():
    # compute_opo_outcome_advantage(OUTCOME, MASK, index)
    expected = [0.27777779, -0.72222221, -0.22222221, None, 0.0, 0.0, 2.0, -1.10000002, 1.89999998, -0.10000002]
    adv, returns = ADVANTAGE_FNS.get("opo")(inputs())
    check_sequences(adv, expected, skip=(LONE,))
    assert per_sequence(adv)[LONE] == 0.0  # veRL: R
    assert torch.equal(adv, returns)


def test_gpg_matches_verl():
    # compute_gpg_outcome_advantage(OUTCOME, MASK, index): alpha = 10 responses / 7 nonzero scores
    expected = [0.89285719, -0.53571427, 0.17857143, None, 0.0, 0.0, 2.85714293, -1.90476203, 2.38095236,
                -0.47619054]
    adv, returns = ADVANTAGE_FNS.get("gpg")(inputs())
    check_sequences(adv, expected, skip=(LONE,))
    assert per_sequence(adv)[LONE] == 0.0  # veRL: alpha * R
    assert torch.equal(adv, returns)


@pytest.mark.parametrize(("std_normalize", "expected"), [
    # compute_grpo_passk_outcome_advantage(OUTCOME, MASK, index, config={"norm_adv_by_std_in_grpo": True}),
    # on the batch without the lone response (veRL refuses a group of one)
    (True, [1.04446375, 0.0, 0.0, None, 0.0, 0.0, 0.0, 0.0, 1.30930662, 0.0]),
    (False, [0.5, 0.0, 0.0, None, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0]),
])
def test_grpo_passk_matches_verl(std_normalize, expected):
    adv, returns = ADVANTAGE_FNS.get("grpo_passk")(inputs(), std_normalize=std_normalize)
    check_sequences(adv, expected)  # the lone response: 0
    assert torch.equal(adv, returns)


def test_reinforce_plus_plus_baseline_matches_verl():
    # compute_reinforce_plus_plus_baseline_outcome_advantage(OUTCOME with the lone response's reward set to 0,
    # MASK, index): rfthpc's lone response enters the whitening with advantage 0, veRL's with its reward
    expected = [0.70103997, -0.47377008, 0.11363494, None, -0.03321631, -0.03321631, -0.03321631, -1.59962976,
                1.9248004, -0.42481971]
    adv, returns = ADVANTAGE_FNS.get("reinforce_plus_plus_baseline")(inputs())
    check_sequences(adv, expected)
    assert torch.equal(adv, returns)


# ---- token estimators ------------------------------------------------------------------------------------------


def test_reinforce_plus_plus_matches_verl():
    # compute_reinforce_plus_plus_outcome_advantage(SHAPED, MASK, config.gamma=0.9)
    adv = [
        [-0.36621898, -0.28128037, -0.1736704, -0.04087006, 0.11991969], [-1.02347374, 0, 0, 0, 0],
        [-0.61078024, -0.55301499, 0, 0, -0.47559771], [0, 0, 0, 0, 0], [-0.39853776, -0.31719005, -0.21357001, 0, 0],
        [-0.2945604, -0.20165968, 0, 0, 0], [0.62794363, 0.82334477, 1.05369091, 1.32286489, 0],
        [-1.14765692, -1.14954472, -1.13840854, -1.11280131, -1.07111514], [1.7999934, 0, 2.12562227, 2.5138998, 0],
        [0.02701897, 0.15565078, 0, 0, 0],
    ]
    returns = [
        [0.54183501, 0.61315, 0.70349997, 0.81499994, 0.94999999], [-0.01, 0, 0, 0, 0],
        [0.33649996, 0.38499996, 0, 0, 0.44999999], [0, 0, 0, 0, 0], [0.5147, 0.583, 0.67000002, 0, 0],
        [0.602, 0.68000001, 0, 0, 0], [1.37653995, 1.54059994, 1.73399997, 1.96000004, 0],
        [-0.11426498, -0.11584999, -0.10649999, -0.08499999, -0.05], [2.36059999, 0, 2.63400006, 2.96000004, 0],
        [0.87199998, 0.98000002, 0, 0, 0],
    ]
    got_adv, got_returns = ADVANTAGE_FNS.get("reinforce_plus_plus")(inputs(SHAPED), gamma=0.9)
    close(got_adv, adv)
    close(got_returns, returns)


VALUES = torch.tensor([
    [0.1, 0.2, 0.3, 0.4, 0.5], [0.6, 0.7, 0.8, 0.9, 1.0], [-0.1, -0.2, 0.3, 0.2, 0.1], [0.5, 0.5, 0.5, 0.5, 0.5],
    [0.3, 0.1, 0.4, 0.1, 0.5], [0.9, 0.2, 0.6, 0.5, 0.3], [0.5, 0.8, 0.9, 0.7, 0.9], [0.3, 0.2, 0.3, 0.8, 0.4],
    [0.6, 0.2, 0.6, 0.4, 0.3], [0.3, 0.8, 0.3, 0.2, 0.7],
])


def test_gae_matches_verl():
    # compute_gae_advantage_return(SHAPED, VALUES, MASK, gamma=0.9, lam=0.8)
    adv = [
        [-0.16425905, -0.16644275, -0.12824583, -0.03396466, 0.13821124], [-1.43512022, 0, 0, 0, 0],
        [-0.10544737, 0.24507898, 0, 0, -0.01021626], [0, 0, 0, 0, 0], [-0.39201924, 0.11505654, -0.12895823, 0, 0],
        [-1.10026777, 0.18273953, 0, 0, 0], [0.23850745, 0.10434605, 0.37153941, 1.34047401, 0],
        [-0.8145678, -0.65735072, -0.81006241, -1.72306955, -1.19763625], [1.04763258, 0, 1.80534875, 3.27003121, 0],
        [0.27120221, -0.26254299, 0, 0, 0],
    ]
    # veRL's returns, on the response tokens (outside them veRL keeps A + V, rfthpc 0)
    returns = torch.tensor([
        [0.3462168, 0.4447456, 0.57047999, 0.73399997, 0.94999999], [-0.00999999, 0.69999999, 0.8, 0.9, 1.0],
        [0.18583998, 0.32199997, 0.64999998, 0.55000001, 0.44999999], [0.5, 0.5, 0.5, 0.5, 0.5],
        [0.39276803, 0.53439999, 0.67000002, 0.1, 0.5], [0.51559997, 0.68000001, 0.60000002, 0.5, 0.30000001],
        [1.01757252, 1.22718406, 1.5072, 1.96000004, 0.89999998], [0.10808457, 0.11400637, 0.11111999, -0.004, -0.05],
        [1.66270411, 1.77320004, 2.17320013, 2.96000004, 0.30000001], [0.83959997, 0.98000002, 0.3, 0.2, 0.69999999],
    ])
    got_adv, got_returns = ADVANTAGE_FNS.get("gae")(inputs(SHAPED, values=VALUES), gamma=0.9, lam=0.8)
    close(got_adv, adv)
    close(got_returns, returns * MASK)


def test_gae_ignores_nan_outside_the_mask():
    poisoned = {"values": torch.where(MASK.bool(), VALUES, torch.nan)}
    rewards = torch.where(MASK.bool(), SHAPED, torch.inf)
    clean = ADVANTAGE_FNS.get("gae")(inputs(SHAPED, values=VALUES), gamma=0.9, lam=0.8)
    dirty = ADVANTAGE_FNS.get("gae")(inputs(rewards, **poisoned), gamma=0.9, lam=0.8)
    for a, b in zip(clean, dirty, strict=True):
        assert torch.equal(a, b)


# ---- gdpo ------------------------------------------------------------------------------------------------------

ACCURACY = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
FORMAT = torch.tensor([0.5, 0.5, 0.0, 0.25, 0.5, 0.0, 0.5, 0.5, 0.5, 0.0])


@pytest.mark.parametrize(("weights", "expected"), [
    # compute_gdpo_outcome_advantage(OUTCOME, MASK, index, config={"gdpo_reward_keys": ["accuracy", "format"],
    # "gdpo_reward_weights": weights}, non_tensor_batch={"accuracy": ..., "format": ...}) with the lone response's
    # components set to 0 (rfthpc's lone response enters the whitening with 0, veRL's with R / (1 + epsilon))
    (None, [1.36436486, -0.12579808, -1.92299771, None, 0.55368924, -0.66302228, -0.05466651, -0.55138844,
            0.93877453, -0.55138582]),
    ([1.0, 0.5], [1.40840328, -0.52456021, -1.69017839, None, 0.39937887, -0.38974929, 0.00481479, -0.96166772,
                  0.97129595, 0.00481585]),
])
def test_gdpo_matches_verl(weights, expected):
    components = {"accuracy": ACCURACY, "format": FORMAT, "length": torch.arange(10.0)}
    adv, returns = ADVANTAGE_FNS.get("gdpo")(inputs(reward_components=components),
                                             reward_keys=["accuracy", "format"], reward_weights=weights)
    check_sequences(adv, expected)
    assert torch.equal(adv, returns)


# ---- optimal token baseline ------------------------------------------------------------------------------------

# log pi(y_t) and sum_v pi_v^2 of the policy, rounded to 4 digits (pi in [0.05, 0.95], pi^2 <= sum_v pi_v^2 <= 1)
OLD = torch.tensor([
    [-0.6999, -0.2992, -2.0431, -1.7789, -1.1188], [-0.477, -0.7111, -0.1546, -0.7764, -0.4795],
    [-1.0106, -0.8878, -2.6579, -1.5996, -1.1568], [-0.6604, -0.3888, -0.2614, -1.6351, -1.1906],
    [-0.4103, -0.135, -0.898, -0.1782, -0.8499], [-0.6022, -0.0971, -2.4944, -1.5292, -0.9517],
    [-1.1252, -0.1179, -1.5687, -1.2281, -1.6841], [-2.5441, -1.4384, -0.1201, -0.3555, -0.3311],
    [-0.6469, -1.312, -0.5514, -2.5278, -1.7439], [-1.3167, -0.2434, -0.2694, -1.2025, -0.7262],
])
SUM_PI_SQUARED = torch.tensor([
    [0.8642, 0.9987, 0.7035, 0.5799, 0.8528], [0.5116, 0.6913, 0.7639, 0.3326, 0.5323],
    [0.7625, 0.7517, 0.2077, 0.6653, 0.7968], [0.5872, 0.7401, 0.8436, 0.8174, 0.9819],
    [0.5044, 0.8383, 0.7469, 0.9743, 0.947], [0.9588, 0.9293, 0.0716, 0.5673, 0.3084],
    [0.1358, 0.9883, 0.8854, 0.0869, 0.6076], [0.4194, 0.4505, 0.8444, 0.8434, 0.6144],
    [0.7701, 0.7708, 0.9051, 0.689, 0.0355], [0.2349, 0.9035, 0.8353, 0.1903, 0.3965],
])
NO_CONTRAST = (4, 5, LONE)
"""Rows of groups without contrast: rfthpc gives them 0; veRL a lone response A = G and the equal-reward
group ~0 (rounding), except the longer response's tail, A = G."""


def otb(token_rewards, **args):
    fields = {"old_log_probs": OLD, "sum_pi_squared": SUM_PI_SQUARED}
    return ADVANTAGE_FNS.get("optimal_token_baseline")(inputs(token_rewards, **fields), **args)


@pytest.mark.parametrize(("handle_zero_tail", "expected"), [
    # compute_optimal_token_baseline_advantage(OUTCOME, MASK, index, OLD, SUM_PI_SQUARED, handle_zero_tail=True)
    (True, [
        [0.36197472, 0.29300672, 0, 1.0, 1.0], [-0.63802528, 0, 0, 0, 0], [-0.13802528, -0.20699328, 0, 0, -0.31371826],
        [0, 0, 0, 0, 0], None, None, None,
        [-1.06826556, -0.31608909, -1.16969895, 0, 0], [1.93173444, 0, 1.83030105, 1.43374527, 0],
        [-0.06826556, 0.68391091, 0, 0, 0],
    ]),
    # ... handle_zero_tail=False
    (False, [
        [0.36197472, 0.29300672, 0, 0, 0.18628174], [-0.63802528, 0, 0, 0, 0],
        [-0.13802528, -0.20699328, 0, 0, -0.31371826], [0, 0, 0, 0, 0], None, None, None,
        [-1.06826556, -0.31608909, -1.16969895, -1.56625473, 0], [1.93173444, 0, 1.83030105, 1.43374527, 0],
        [-0.06826556, 0.68391091, 0, 0, 0],
    ]),
])
def test_optimal_token_baseline_matches_verl(handle_zero_tail, expected):
    adv, returns = otb(OUTCOME, handle_zero_tail=handle_zero_tail)
    for row in range(10):
        if row in NO_CONTRAST:
            assert torch.all(adv[row] == 0)
        else:
            close(adv[row], expected[row])
    # veRL's returns (reward-to-go), on the response tokens
    close(returns, (OUTCOME.flip(-1).cumsum(-1).flip(-1)) * MASK)


def test_optimal_token_baseline_with_shaped_rewards_matches_verl():
    # compute_optimal_token_baseline_advantage(SHAPED, MASK, index, OLD, SUM_PI_SQUARED): the penalty gives
    # group 3 contrast, so only the lone response differs
    adv = [
        [0.31129825, 0.25198585, 0.0, 0.90999997, 0.94999999], [-0.5487017, 0, 0, 0, 0],
        [-0.11870173, -0.17801419, 0, 0, -0.31371826], [0, 0, 0, 0, 0], [-0.02488524, -0.0235402, 0.67000002, 0, 0],
        [0.00511473, 0.00645977, 0, 0, 0], [0, 0, 0, 0, 0], [-1.11836255, -0.35401979, -1.18919384, -0.09, -0.05],
        [1.95163751, 0, 1.86080623, 1.45764112, 0], [0.00163752, 0.76598024, 0, 0, 0],
    ]
    # veRL's returns, on the response tokens (outside them veRL keeps the reward-to-go, rfthpc 0)
    returns = [
        [0.84999996, 0.86000001, 0.88, 0.90999997, 0.94999999], [-0.01, 0, 0, 0, 0], [0.42, 0.43, 0, 0, 0.45],
        [0, 0, 0, 0, 0], [0.64000005, 0.65000004, 0.67000002, 0, 0], [0.67000002, 0.68000001, 0, 0, 0],
        [1.9000001, 1.91000009, 1.93000007, 1.96000004, 0], [-0.15, -0.14, -0.12, -0.09, -0.05],
        [2.92000008, 0, 2.93000007, 2.96000004, 0], [0.97000003, 0.98000002, 0, 0, 0],
    ]
    got_adv, got_returns = otb(SHAPED)
    close(got_adv, adv)  # veRL: the lone response's A = G
    close(got_returns, returns)


def test_optimal_token_baseline_ignores_nan_outside_the_mask():
    poisoned = {"old_log_probs": torch.where(MASK.bool(), OLD, torch.nan),
                "sum_pi_squared": torch.where(MASK.bool(), SUM_PI_SQUARED, torch.inf)}
    dirty = ADVANTAGE_FNS.get("optimal_token_baseline")(inputs(torch.where(MASK.bool(), SHAPED, torch.nan),
                                                               **poisoned))
    for a, b in zip(otb(SHAPED), dirty, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("handle_zero_tail", "expected"), [
    # compute_multi_turn_optimal_token_baseline_advantage(OUTCOME, MASK, index, OLD, SUM_PI_SQUARED,
    # handle_zero_tail=True): rows with holes (2 and 8) are compared at their k-th response token
    (True, [
        [0.36197472, 0.29300672, 0.26257318, 1.0, 1.0], [-0.63802528, 0, 0, 0, 0],
        [-0.13802528, -0.20699328, 0, 0, -0.23742682], [0, 0, 0, 0, 0], None, None, None,
        [-1.06826556, -1.15015399, -1.69646156, 0, 0], [1.93173444, 0, 1.84984601, 1.30353844, 0],
        [-0.06826556, -0.15015399, 0, 0, 0],
    ]),
    # ... handle_zero_tail=False
    (False, [
        [0.36197472, 0.29300672, 0.26257318, 0, 0], [-0.63802528, 0, 0, 0, 0],
        [-0.13802528, -0.20699328, 0, 0, -0.23742682], [0, 0, 0, 0, 0], None, None, None,
        [-1.06826556, -1.15015399, -1.69646156, 0, 0], [1.93173444, 0, 1.84984601, 1.30353844, 0],
        [-0.06826556, -0.15015399, 0, 0, 0],
    ]),
])
def test_tir_optimal_token_baseline_matches_verl(handle_zero_tail, expected):
    fields = {"old_log_probs": OLD, "sum_pi_squared": SUM_PI_SQUARED}
    adv, returns = ADVANTAGE_FNS.get("tir_optimal_token_baseline")(inputs(**fields), handle_zero_tail=handle_zero_tail)
    for row in range(10):
        if row in NO_CONTRAST:
            assert torch.all(adv[row] == 0)
        else:
            close(adv[row], expected[row])
    close(returns, (OUTCOME.flip(-1).cumsum(-1).flip(-1)) * MASK)


def test_tir_optimal_token_baseline_with_shaped_rewards_matches_verl():
    # compute_multi_turn_optimal_token_baseline_advantage(SHAPED, MASK, index, OLD, SUM_PI_SQUARED)
    adv = [
        [0.31129825, 0.25198585, 0.22581291, 0.90999997, 0.94999999], [-0.5487017, 0, 0, 0, 0],
        [-0.11870173, -0.17801419, 0, 0, -0.2041871], [0, 0, 0, 0, 0], [-0.02488524, -0.0235402, 0.67000002, 0, 0],
        [0.00511473, 0.00645977, 0, 0, 0], [0, 0, 0, 0, 0], [-1.11836255, -1.1980505, -1.74170053, -0.09, -0.05],
        [1.95163751, 0, 1.87194955, 1.33829951, 0], [0.00163752, -0.07805049, 0, 0, 0],
    ]
    fields = {"old_log_probs": torch.where(MASK.bool(), OLD, torch.nan), "sum_pi_squared": SUM_PI_SQUARED}
    got, _ = ADVANTAGE_FNS.get("tir_optimal_token_baseline")(inputs(SHAPED, **fields))
    close(got, adv)  # veRL: the lone response's A = G
