"""Rollout correction: importance weights, rejection, metrics, bypass_mode and decoupled_ppo losses.

Reference values marked "veRL" were produced by veRL 0.9.1 on the inputs below:
`verl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_and_rejection_mask(P, B, M, ...)`
(old_log_prob=P, rollout_log_prob=B) and `verl.trainer.ppo.core_algos.compute_policy_loss_reinforce`.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from rfthpc.algorithms.aggregation import aggregate_loss, token_weights
from rfthpc.algorithms.declare import Needs
from rfthpc.algorithms.policy_loss import PolicyLossInputs, ppo
from rfthpc.algorithms.rollout_correction import bypass_mode, decoupled_ppo, step_correction
from rfthpc.algorithms.rollout_settings import RolloutCorrection
from rfthpc.errors import ConfigError

P = torch.tensor([[-1.0, -2.0, -0.5, -0.7], [-0.3, -0.2, 0.0, 0.0], [-3.0, -1.0, -1.0, -1.0]])
B = torch.tensor([[-1.5, -1.0, -0.5, -0.9], [-0.1, -0.9, 0.0, 0.0], [-1.0, -1.2, -0.8, -1.1]])
# Row 1 is padded after two tokens; row 2 has a hole (an observation token) at position 1.
M = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 1]], dtype=torch.bool)
KL, K3 = 0.21111109852790833, 0.22552484273910522  # veRL rollout_corr/kl, rollout_corr/k3_kl


def rc(**kw) -> RolloutCorrection:
    fields = {"rollout_is": None, "rollout_is_threshold": "2.0", "rollout_is_batch_normalize": False, "rollout_rs": None,
                  "rollout_rs_threshold": None, "bypass_mode": False, "loss_type": "ppo_clip"}
    return RolloutCorrection.of(SimpleNamespace(**{**fields, **kw}))


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)


CASES = {
    "token TIS": ({"rollout_is": "token", "rollout_is_threshold": 2.0},
                  [[1.6487212181091309, 0.3678794503211975, 1.0, 1.2214027643203735],
                   [0.8187307119369507, 2.0, 0.0, 0.0], [0.1353352814912796, 0.0, 0.8187307715415955, 1.1051709651947021]],
                  {"rollout_is_mean": 1.012885570526123, "rollout_is_max": 2.0,
                   "rollout_is_ratio_fraction_high": 1 / 9, "rollout_is_ratio_fraction_low": 2 / 9}),
    "sequence TIS": ({"rollout_is": "sequence", "rollout_is_threshold": "2.0"},
                     [[0.740818202495575] * 4, [1.6487212181091309] * 2 + [0.0, 0.0],
                      [0.12245643883943558, 0.0, 0.12245643883943558, 0.12245643883943558]],
                     {"rollout_is_mean": 0.7364538311958313, "rollout_is_max": 1.6487212181091309,
                      "rollout_is_ratio_fraction_high": 0.0, "rollout_is_ratio_fraction_low": 1 / 3}),
    "token IcePop": ({"rollout_is": "token", "rollout_is_threshold": "0.5_1.5"},
                     [[0.0, 0.0, 1.0, 1.2214027643203735], [0.8187307119369507, 0.0, 0.0, 0.0],
                      [0.0, 0.0, 0.8187307715415955, 1.1051709651947021]],
                     {"rollout_is_mean": 0.5515595078468323, "rollout_is_max": 1.2214027643203735,
                      "rollout_is_ratio_fraction_high": 2 / 9, "rollout_is_ratio_fraction_low": 2 / 9,
                      "rollout_is_oob_ratio": 4 / 9}),
    "sequence IcePop": ({"rollout_is": "sequence", "rollout_is_threshold": "0.5_1.5"},
                        [[0.740818202495575] * 4, [0.0] * 4, [0.0] * 4],
                        {"rollout_is_mean": 0.32925254106521606, "rollout_is_max": 1.6487212181091309,
                         "rollout_is_ratio_fraction_high": 1 / 3, "rollout_is_ratio_fraction_low": 1 / 3,
                         "rollout_is_oob_ratio": 5 / 9}),
    "token batch-normalised": ({"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True},
                               [[1.627746820449829, 0.3631994128227234, 0.9872783422470093, 1.2058645486831665],
                                [0.808315098285675, 1.9745566844940186, 0.0, 0.0],
                                [0.13361360132694244, 0.0, 0.8083151578903198, 1.091111421585083]],
                               {"rollout_is_mean": 1.012885570526123, "rollout_is_max": 2.0}),
    "sequence batch-normalised": ({"rollout_is": "sequence", "rollout_is_threshold": 5.0,
                                       "rollout_is_batch_normalize": True},
                                  [[0.8847365379333496] * 4, [1.9690172672271729] * 2 + [0.0, 0.0],
                                   [0.14624597132205963, 0.0, 0.14624597132205963, 0.14624597132205963]],
                                  {"rollout_is_mean": 0.7364538311958313, "rollout_is_max": 1.6487212181091309}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_importance_weights_and_metrics_match_verl(name: str) -> None:
    config, expected_weights, expected_metrics = CASES[name]
    weights, keep, metrics = step_correction(P, B, M, rc(**config))
    assert keep is None
    torch.testing.assert_close(weights, torch.tensor(expected_weights), rtol=1e-5, atol=1e-7)
    assert close(metrics["rollout_corr/kl"], KL) and close(metrics["rollout_corr/k3_kl"], K3)
    for key, value in expected_metrics.items():
        assert close(metrics[f"rollout_corr/{key}"], value), (key, metrics[f"rollout_corr/{key}"], value)


REJECTION = {
    # veRL: the kept mask and rollout_rs_masked_fraction / rollout_rs_seq_masked_fraction.
    "geometric mean (seq_mean_k1)": ({"rollout_rs": "seq_mean_k1", "rollout_rs_threshold": "0.9_1.1"},
                                     [[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]], 5 / 9, 2 / 3),
    "three rules": ({"rollout_rs": "token_k1,seq_sum_k3,seq_max_k2", "rollout_rs_threshold": "0.5_2.0,0.5,0.3"},
                    [[0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], 8 / 9, 1.0),
    "k2 and k3, one shared bound": ({"rollout_rs": "token_k2,seq_mean_k3", "rollout_rs_threshold": "0.1"},
                                    [[0, 0, 0, 0]] * 3, 1.0, 1.0),
    "k1 with one number u means [1/u, u]": ({"rollout_rs": "seq_sum_k1", "rollout_rs_threshold": "1.5"},
                                           [[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]], 5 / 9, 2 / 3),
}


@pytest.mark.parametrize("name", list(REJECTION))
def test_rejection_matches_verl(name: str) -> None:
    config, kept, token_fraction, seq_fraction = REJECTION[name]
    weights, keep, metrics = step_correction(P, B, M, rc(**config))
    assert weights is None
    assert keep.tolist() == (torch.tensor(kept, dtype=torch.bool) & M).tolist()
    assert close(metrics["rollout_corr/rollout_rs_masked_fraction"], token_fraction)
    assert close(metrics["rollout_corr/rollout_rs_seq_masked_fraction"], seq_fraction)


def test_padding_holding_inf_and_nan_never_reaches_a_result() -> None:
    config = rc(rollout_is="sequence", rollout_rs="seq_max_k3,token_k1", rollout_rs_threshold="5.0,0.2_5.0")
    clean = step_correction(P, B, M, config, torch.tensor([0, 1, 1]))
    spoiled_p, spoiled_b = P.clone(), B.clone()
    spoiled_p[~M] = float("nan")
    spoiled_b[~M] = float("-inf")
    dirty = step_correction(spoiled_p, spoiled_b, M, config, torch.tensor([0, 1, 1]))
    assert torch.equal(clean[0], dirty[0]) and torch.equal(clean[1], dirty[1])
    assert clean[2] == dirty[2] and all(math.isfinite(v) for v in dirty[2].values())


def test_an_empty_batch_gives_zero_weights_nothing_kept_and_zero_metrics() -> None:
    empty = torch.zeros_like(M)
    weights, keep, metrics = step_correction(P, B, empty, rc(rollout_is="sequence", rollout_rs="seq_mean_k1",
                                                             rollout_rs_threshold="0.9_1.1"), torch.tensor([2, 2, 2]))
    assert not weights.any() and not keep.any()
    assert all(v == 0.0 for k, v in metrics.items() if not k.endswith("/samples"))
    assert metrics["rollout_corr/staleness_2/samples"] == 3.0


def test_one_token_responses_weigh_that_token() -> None:
    p, b, m = torch.tensor([[-1.0], [-2.0]]), torch.tensor([[-2.0], [-1.0]]), torch.ones(2, 1, dtype=torch.bool)
    for level in ("token", "sequence"):
        weights, _, metrics = step_correction(p, b, m, rc(rollout_is=level, rollout_is_threshold="2.0"))
        assert torch.allclose(weights, torch.tensor([[2.0], [math.exp(-1.0)]]))
        assert close(metrics["rollout_corr/rollout_is_ratio_fraction_high"], 0.5)


def test_metrics_split_by_staleness() -> None:
    """Row 0 is on-policy-ish (staleness 0), rows 1 and 2 one version stale: k1 and k3 per group, by hand."""
    config = rc(rollout_is="token", rollout_is_threshold="2.0", rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0")
    _, _, metrics = step_correction(P, B, M, config, torch.tensor([0, 1, 1]))
    l0 = [0.5, -1.0, 0.0, 0.2]
    l1 = [-0.2, 0.7, -2.0, -0.2, 0.1]  # row 1's two tokens, row 2's three
    assert close(metrics["rollout_corr/staleness_0/kl"], -sum(l0) / 4)
    assert close(metrics["rollout_corr/staleness_1/kl"], -sum(l1) / 5)
    assert close(metrics["rollout_corr/staleness_0/k3_kl"], sum(math.exp(x) - 1 - x for x in l0) / 4)
    assert close(metrics["rollout_corr/staleness_1/k3_kl"], sum(math.exp(x) - 1 - x for x in l1) / 5)
    assert metrics["rollout_corr/staleness_0/samples"] == 1.0 and metrics["rollout_corr/staleness_1/samples"] == 2.0
    # token_k1 keeps -l in [log 0.5, log 2]: rejects l = -1.0 (row 0) and l = -2.0, 0.7 (rows 1, 2).
    assert close(metrics["rollout_corr/staleness_0/rollout_rs_masked_fraction"], 1 / 4)
    assert close(metrics["rollout_corr/staleness_1/rollout_rs_masked_fraction"], 2 / 5)
    w1 = [math.exp(-0.2), 2.0, math.exp(-2.0), math.exp(-0.2), math.exp(0.1)]
    assert close(metrics["rollout_corr/staleness_1/rollout_is_mean"], sum(w1) / 5)


# ---- bypass_mode: veRL's compute_policy_loss_reinforce with token-TIS weights (threshold 2) -----------

A = torch.tensor([[1.0] * 4, [-0.5] * 4, [2.0] * 4])
VERL_REINFORCE = {
    "token-mean": (0.89738529920578, [[-0.18319125473499298, -0.04087549448013306, -0.1111111119389534,
                                       -0.1357114166021347], [0.04548503831028938, 0.1111111119389534, 0.0, 0.0],
                                      [-0.030074506998062134, 0.0, -0.18194016814231873, -0.24559354782104492]]),
    "seq-mean-token-sum": (2.6921558380126953, [[-0.5495737791061401, -0.12262648344039917, -0.3333333432674408,
                                                 -0.4071342647075653], [0.13645511865615845, 0.3333333432674408, 0, 0],
                                                [-0.0902235209941864, 0.0, -0.5458205342292786, -0.7367806434631348]]),
    "seq-mean-token-mean": (0.7755774855613708, [[-0.13739344477653503, -0.030656620860099792, -0.0833333358168602,
                                                  -0.10178356617689133], [0.06822755932807922, 0.1666666716337204, 0, 0],
                                                 [-0.030074506998062134, 0.0, -0.18194016814231873,
                                                  -0.24559354782104492]]),
}


@pytest.mark.parametrize("mode", list(VERL_REINFORCE))
def test_bypass_mode_is_verls_reinforce_with_is_weights(mode: str) -> None:
    weights, _, _ = step_correction(P, B, M, rc(rollout_is="token", rollout_is_threshold="2.0"))
    lp = P.clone().requires_grad_(True)
    loss, metrics = bypass_mode(PolicyLossInputs(lp, M, old_log_prob=B, advantages=A, rollout_is_weights=weights),
                                loss_agg_mode=mode)
    loss.backward()
    value, grad = VERL_REINFORCE[mode]
    assert close(loss.item(), value) and close(metrics["actor/ppo_kl"], KL)
    torch.testing.assert_close(lp.grad, torch.tensor(grad), rtol=1e-5, atol=1e-7)


def test_bypass_mode_without_weights_is_plain_reinforce() -> None:
    lp = P.clone().requires_grad_(True)
    loss, _ = bypass_mode(PolicyLossInputs(lp, M, old_log_prob=B, advantages=A))
    expected = -(A * P)[M].mean()
    assert close(loss.item(), expected.item())


# ---- decoupled PPO -----------------------------------------------------------------------------------


def _decoupled_inputs(lp: torch.Tensor) -> PolicyLossInputs:
    # ratio pi / pi_prox = [1.1, 0.7]; v = pi_prox / mu = [2, 0.25]; A = [1, -1].
    return PolicyLossInputs(lp, torch.ones(1, 2, dtype=torch.bool), old_log_prob=torch.zeros(1, 2),
                            advantages=torch.tensor([[1.0, -1.0]]),
                            behaviour_log_prob=torch.tensor([[math.log(0.5), math.log(4.0)]]))


def test_decoupled_ppo_by_hand() -> None:
    """Token 0: -A r = -1.1, times v = 2 -> -2.2. Token 1: A < 0, r = 0.7 below 1 - 0.2: the clipped
    term -A * 0.8 = 0.8 wins (dual clip 3 not reached), times v = 0.25 -> 0.2. Mean: -1.0.
    Gradient: token 0: -v A r / 2 = -1.1; token 1 is clipped: 0."""
    lp = torch.tensor([[math.log(1.1), math.log(0.7)]], requires_grad=True)
    loss, metrics = decoupled_ppo(_decoupled_inputs(lp))
    loss.backward()
    assert close(loss.item(), -1.0)
    torch.testing.assert_close(lp.grad, torch.tensor([[-1.1, 0.0]]))
    assert close(metrics["actor/pg_clipfrac"], 0.5) and close(metrics["actor/behav_imp_weight_mean"], 1.125)
    # The cap (AReaL's behav_imp_weight_cap) drops token 0 (v = 2 > 1.5); it stays in the denominator.
    lp.grad = None
    loss, metrics = decoupled_ppo(_decoupled_inputs(lp), behav_imp_weight_cap=1.5)
    loss.backward()
    assert close(loss.item(), 0.1) and metrics["actor/behav_capped_fraction"] == 0.5
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, 0.0]]))


def test_decoupled_ppo_is_ppo_when_behaviour_is_proximal() -> None:
    lp = P.clone()
    inputs = PolicyLossInputs(lp + 0.1, M, old_log_prob=lp, advantages=A, behaviour_log_prob=lp)
    for mode in VERL_REINFORCE:
        assert close(decoupled_ppo(inputs, loss_agg_mode=mode)[0].item(), ppo(inputs, loss_agg_mode=mode)[0].item())


def test_decoupled_ppo_rejects_a_cap_of_one_or_less() -> None:
    with pytest.raises(ConfigError, match="behav_imp_weight_cap"):
        decoupled_ppo(_decoupled_inputs(torch.zeros(1, 2)), behav_imp_weight_cap=1.0)


# ---- aggregation.token_weights: how the trainer applies weights to any loss ---------------------------


def test_token_weights_multiply_the_per_token_loss_in_every_mode() -> None:
    loss = torch.tensor([[1.0, 2.0, float("inf")], [3.0, 4.0, 5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    w = torch.tensor([[0.5, 2.0, 0.0], [1.0, 0.0, 3.0]])
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        with token_weights(w) as used:
            weighted = aggregate_loss(loss, mask, mode)
        plain = aggregate_loss(torch.where(mask, loss * w, torch.zeros_like(loss)), mask, mode)
        assert used.uses == 1 and torch.isfinite(weighted) and close(weighted.item(), plain.item())
    with token_weights(w), token_weights(w):  # nested blocks multiply
        assert close(aggregate_loss(loss, mask).item(), (0.25 + 8 + 3 + 0 + 45) / 5)
    assert close(aggregate_loss(loss, mask).item(), 15 / 5)  # nothing applies outside


def test_token_weights_refuse_a_loss_of_another_shape() -> None:
    with token_weights(torch.ones(2, 3)), pytest.raises(ConfigError, match="rollout_is_weights=True"):
        aggregate_loss(torch.ones(2, 1), torch.ones(2, 1))


# ---- the trainer's Algorithm: one place applies the weights to whatever loss is configured -------------


def _algorithm(loss_name: str, loss, correction: RolloutCorrection):
    from rfthpc import algorithms as algos
    from rfthpc.trainer.losses import Algorithm

    no_bonus = lambda entropy, mask: (torch.zeros(()), {})
    needs = algos.POLICY_LOSS_FNS.needs(loss_name) if loss_name != "user" else Needs()
    return Algorithm("grpo", loss_name, loss, no_bonus, "token-mean", rollout=correction, policy_needs=needs)


def _call(alg, weights=None):
    return alg.actor_loss(P + 0.05, torch.zeros_like(P), M, P, A, torch.zeros(3), None,
                          behaviour_log_prob=B, rollout_is_weights=weights)


def test_the_algorithm_multiplies_a_proximal_losss_token_loss_by_the_steps_weights() -> None:
    correction = rc(rollout_is="token", rollout_is_threshold="2.0")
    weights, _, _ = step_correction(P, B, M, correction)
    loss, _ = _call(_algorithm("ppo", ppo, correction), weights)
    with token_weights(weights):
        expected, _ = ppo(PolicyLossInputs(P + 0.05, M, old_log_prob=P, advantages=A))
    plain, _ = ppo(PolicyLossInputs(P + 0.05, M, old_log_prob=P, advantages=A))
    assert close(loss.item(), expected.item()) and not close(loss.item(), plain.item())
    # veRL's bypass mode: PPO's ratio against mu already corrects, the weights are only measured.
    bypass = rc(rollout_is="token", rollout_is_threshold="2.0", bypass_mode=True)
    assert close(_call(_algorithm("ppo", ppo, bypass), weights)[0].item(), plain.item())


def test_a_loss_comparing_with_mu_gets_weights_against_the_current_policy() -> None:
    """bypass_mode (REINFORCE): w = min(pi_theta / mu, 2) from this micro-batch's log-probabilities."""
    correction = rc(rollout_is="token", rollout_is_threshold="2.0")
    loss, _ = _call(_algorithm("bypass_mode", bypass_mode, correction))
    current, _, _ = step_correction(P + 0.05, B, M, correction)
    expected, _ = bypass_mode(PolicyLossInputs(P + 0.05, M, old_log_prob=P, advantages=A, rollout_is_weights=current))
    assert close(loss.item(), expected.item())


def test_a_loss_the_weights_cannot_reach_is_named() -> None:
    def sequence_loss(inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean"):
        return -(inputs.advantages[:, 0] * inputs.log_prob.sum(-1)).mean(), {}

    correction = rc(rollout_is="token", rollout_is_threshold="2.0")
    weights, _, _ = step_correction(P, B, M, correction)
    with pytest.raises(ConfigError, match="'user' does not aggregate its per-token loss"):
        _call(_algorithm("user", sequence_loss, correction), weights)
