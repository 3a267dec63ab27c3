"""The policy losses beyond ppo/pg (sequence, covariance, trust-region and REINFORCE families)
against hand-computed losses, gradients and metrics, their edge cases and argument checks.
veRL agreement is tested in test_policy_loss_verl.py."""

import math

import pytest
import torch

from rfthpc.algorithms import POLICY_LOSS_FNS
from rfthpc.algorithms.policy_loss import PolicyLossInputs
from rfthpc.errors import ConfigError

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


def inputs_from_log_ratios(log_prob, log_ratios, advantages, mask):
    """Inputs with log pi - log mu = `log_ratios`; log_prob is a leaf that records gradients."""
    log_prob = torch.tensor(log_prob, dtype=torch.float64, requires_grad=True)
    return PolicyLossInputs(
        log_prob=log_prob,
        response_mask=torch.tensor(mask),
        old_log_prob=log_prob.detach() - torch.tensor(log_ratios, dtype=torch.float64),
        advantages=torch.tensor(advantages, dtype=torch.float64),
    )


def run(name, inputs, **args):
    loss, metrics = POLICY_LOSS_FNS.get(name)(inputs, **args)
    loss.backward()
    return loss.item(), inputs.log_prob.grad, metrics


def close(actual, expected):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float64),
                               torch.tensor(expected, dtype=torch.float64), rtol=1e-9, atol=1e-12)


def test_gspo_clips_the_response_ratio():
    # row 0: log s = mean(0.2, 0.4) = 0.3, s = 1.35 > 1.28 with A > 0: clipped, no gradient;
    # row 1: log s = 0, s = 1: loss -A s, gradient -A s per token
    inputs = inputs_from_log_ratios([[-1.0, -1.0], [-1.0, -1.0]], [[0.2, 0.4], [0.1, -0.1]],
                                    [[1.0, 1.0], [1.0, 1.0]], [[1, 1], [1, 1]])
    loss, grad, metrics = run("gspo", inputs, clip_range_low=0.2, clip_range_high=0.28, loss_agg_mode="token-mean")
    assert loss == pytest.approx((-1.28 * 2 - 1.0 * 2) / 4)
    close(grad, [[0.0, 0.0], [-0.25, -0.25]])
    assert metrics["actor/pg_clipfrac"] == 0.5 and metrics["actor/pg_clipfrac_lower"] == 0.0
    assert metrics["actor/ppo_kl_seq"] == pytest.approx(-0.15)


def test_gspo_defaults_are_the_papers():
    # s = e^0.001 lies outside [1 - 3e-4, 1 + 4e-4]: clipped with the defaults, not with clip_range 0.2
    batch = ([[-1.0]], [[0.001]], [[1.0]], [[1]])
    assert run("gspo", inputs_from_log_ratios(*batch))[2]["actor/pg_clipfrac"] == 1.0
    assert run("gspo", inputs_from_log_ratios(*batch), clip_range=0.2)[2]["actor/pg_clipfrac"] == 0.0


GMPO_BATCH = ([[-1.0, -1.0], [-1.0, -1.0]], [[0.5, -0.2], [-0.5, 0.3]], [[1.0, 1.0], [-1.0, -1.0]],
              [[1, 1], [1, 1]])


def test_geo_mean_clips_log_ratios_on_the_advantage_side():
    loss, grad, metrics = run("gmpo", inputs_from_log_ratios(*GMPO_BATCH), loss_agg_mode="seq-mean-token-mean")
    # row 0 (A = 1): 0.5 -> 0.4, -0.2 kept: l = -e^0.1; row 1 (A = -1): -0.5 -> -0.4, 0.3 kept: l = e^-0.05
    assert loss == pytest.approx((-math.exp(0.1) + math.exp(-0.05)) / 2)
    # d l_b / d log pi_t = -A_b exp(mean r') / n_b for unclipped tokens; / 2 responses
    close(grad, [[0.0, -math.exp(0.1) / 4], [0.0, math.exp(-0.05) / 4]])
    assert metrics["actor/pg_clipfrac"] == 0.25 and metrics["actor/pg_clipfrac_lower"] == 0.25


def test_geo_mean_every_token_carries_its_responses_loss():
    lengths = inputs_from_log_ratios([[-1.0, -1.0], [-1.0, -1.0]], [[0.0, 0.0], [0.0, 0.0]],
                                     [[1.0, 1.0], [2.0, 2.0]], [[1, 1], [1, 0]])
    loss, _, _ = run("geo_mean", lengths, loss_agg_mode="token-mean")
    assert loss == pytest.approx((2 * -1.0 + 1 * -2.0) / 3)


def test_geo_mean_weights_each_response_by_its_tokens_geometric_mean_rollout_weight():
    # veRL's geo_mean: one weight per response, exp(mean log(w + 1e-10)); not each token's own weight
    weights = torch.tensor([[0.5, 2.0], [4.0, 1.0]], dtype=torch.float64)
    plain = inputs_from_log_ratios(*GMPO_BATCH)
    weighted = PolicyLossInputs(log_prob=plain.log_prob, response_mask=plain.response_mask,
                                old_log_prob=plain.old_log_prob, advantages=plain.advantages,
                                rollout_is_weights=weights)
    loss, _, _ = run("gmpo", weighted, loss_agg_mode="seq-mean-token-mean")
    seq_weight = [math.exp((math.log(0.5 + 1e-10) + math.log(2.0 + 1e-10)) / 2),
                  math.exp((math.log(4.0 + 1e-10) + math.log(1.0 + 1e-10)) / 2)]  # 1 and 2, not 1.25 and 2.5
    assert loss == pytest.approx((-math.exp(0.1) * seq_weight[0] + math.exp(-0.05) * seq_weight[1]) / 2)


# cov = A (log pi - mean log pi), with mean A = 0 and mean log pi = -9.1 / 6:
#   row 0: 2.833, 2.633, -2.967; row 1: 2.967, -2.433, 1.967 (candidates in (1, 5): 4 tokens)
COV_BATCH = ([[-0.1, -0.2, -3.0], [-3.0, -0.3, -2.5]], [[0.1] * 3, [0.1] * 3], [[2.0] * 3, [-2.0] * 3],
             [[1, 1, 1], [1, 1, 1]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clip_cov_drops_k_random_candidates(seed):
    torch.manual_seed(seed)
    loss, grad, metrics = run("clip_cov", inputs_from_log_ratios(*COV_BATCH), clip_range=10.0, clip_cov_ratio=0.34)
    dropped = grad == 0
    assert int(dropped.sum()) == 2  # k = floor(0.34 * 6)
    assert not dropped[0, 2] and not dropped[1, 1]  # cov outside (1, 5): never dropped
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 6)
    kept = ~dropped
    # the others: -A rho with rho = e^0.1, gradient -A rho / 6
    adv = torch.tensor(COV_BATCH[2], dtype=torch.float64)
    assert loss == pytest.approx(float((-adv * math.exp(0.1))[kept].sum() / 6))
    close(grad[kept], (-adv * math.exp(0.1) / 6)[kept].tolist())


def test_clip_cov_keeps_tokens_ppo_already_clips():
    # rho = e^0.1 > 1 + 0.05 with A > 0 in row 0: PPO clips them, so only row 1's two candidates remain
    torch.manual_seed(0)
    _, grad, metrics = run("clip_cov", inputs_from_log_ratios(*COV_BATCH), clip_range=0.05, clip_cov_ratio=0.5)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 6)
    assert grad[1, 0] == 0 and grad[1, 2] == 0 and grad[1, 1] != 0


def test_kl_cov_penalises_the_top_k_tokens():
    loss, grad, metrics = run("kl_cov", inputs_from_log_ratios(*COV_BATCH), kl_cov_ratio=0.34, ppo_kl_coef=0.1)
    # top-2 cov: (1, 0) and (0, 0) get + 0.1 |0.1|; sum of -A rho is 0
    assert loss == pytest.approx(0.1 * 0.1 * 2 / 6)
    rho = math.exp(0.1)
    close(grad, [[(-2 * rho + 0.1) / 6, -2 * rho / 6, -2 * rho / 6], [(2 * rho + 0.1) / 6, 2 * rho / 6, 2 * rho / 6]])
    assert metrics["actor/kl_cov_frac"] == pytest.approx(2 / 6)
    assert metrics["actor/ppo_kl"] == pytest.approx(0.1)  # veRL's: mean |log rho|


def test_dppo_tv_drops_tokens_whose_probability_moved_too_far():
    # token 0: p - q = 0.5 - 0.2 = 0.3 > 0.25 (A > 0): out; token 1: 0.3 - 0.2 = 0.1: in, rho = 1.5;
    # token 2: rho = 0.9 / 0.15 = 6 > c = 3, p - q = 0.75 but A < 0 only bounds a fall: in, weight 3
    log_p = [[math.log(0.5), math.log(0.3), math.log(0.9)]]
    log_q = [[math.log(0.2), math.log(0.2), math.log(0.15)]]
    inputs = PolicyLossInputs(torch.tensor(log_p, dtype=torch.float64, requires_grad=True), torch.tensor([[1, 1, 1]]),
                              torch.tensor(log_q, dtype=torch.float64),
                              torch.tensor([[1.0, 1.0, -1.0]], dtype=torch.float64))
    loss, grad, metrics = run("dppo_tv", inputs, clip_range=0.25)
    assert loss == pytest.approx((-1.5 * math.log(0.3) + 3.0 * math.log(0.9)) / 3)
    close(grad, [[0.0, -1.5 / 3, 3.0 / 3]])
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / 3)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 3)


def test_sapo_gradient_equals_ppos_on_policy():
    inputs = inputs_from_log_ratios([[-1.0, -2.0]], [[0.0, 0.0]], [[1.0, -1.0]], [[1, 1]])
    loss, grad, metrics = run("sapo", inputs, loss_agg_mode="token-mean")
    # f(1) = (4 / tau) sigmoid(0) = 2 / tau; gradient -A 4 sigma (1 - sigma) rho = -A
    assert loss == pytest.approx((-2.0 + 2.0 / 1.05) / 2)
    close(grad, [[-0.5, 0.5]])
    assert metrics["actor/sapo_gate_mean"] == pytest.approx((2.0 + 2.0 / 1.05) / 2)


def test_sapo_gate_fades_far_from_one():
    inputs = inputs_from_log_ratios([[-1.0]], [[math.log(3.0)]], [[1.0]], [[1]])
    _, grad, _ = run("sapo", inputs)
    s = 1 / (1 + math.exp(-2.0))
    close(grad, [[-4 * s * (1 - s) * 3.0]])  # 0.31, where PPO would pass 0 and plain PG 1


def test_m2po_drops_the_largest_second_moments():
    # in the trust region (A > 0, log rho > 0): M2 = 0.01, 0.25, 0.09; mean 0.117 > 0.04;
    # running means of the sorted values 0.01, 0.05, 0.117: keep one, drop the 0.25 and 0.09 tokens
    inputs = inputs_from_log_ratios([[-1.0] * 4], [[0.1, 0.5, 0.3, -0.2]], [[1.0] * 4], [[1, 1, 1, 1]])
    loss, grad, metrics = run("m2po", inputs)
    assert loss == pytest.approx((-math.exp(0.1) - math.exp(-0.2)) / 4)  # dropped tokens still count
    close(grad, [[-math.exp(0.1) / 4, 0.0, 0.0, -math.exp(-0.2) / 4]])
    assert metrics["actor/m2po_m2_before"] == pytest.approx(0.35 / 3)
    assert metrics["actor/m2po_m2_after"] == pytest.approx(0.01)
    assert metrics["actor/m2po_masked_fraction"] == metrics["actor/pg_clipfrac"] == 0.5
    assert metrics["actor/m2po_trust_region_fraction"] == 0.75


def test_m2po_keeps_everything_below_the_threshold():
    inputs = inputs_from_log_ratios([[-1.0] * 2], [[0.1, 0.1]], [[1.0] * 2], [[1, 1]])
    assert run("m2po", inputs)[2]["actor/pg_clipfrac"] == 0.0


@pytest.mark.parametrize(("log_ratio_clip", "value"), [(20.0, 20.0), (3.0, 3.0), (30.0, 25.0)])
def test_m2po_bounds_the_ratio_but_not_its_gradient(log_ratio_clip, value):
    """Trinity-RFT's log_ratio_clip: rho = e^25 (A < 0, outside M2PO's trust region) counts as
    e^min(25, clip), and the gradient -A rho of the bounded value still flows (a hard clamp gives 0)."""
    inputs = inputs_from_log_ratios([[-1.0]], [[25.0]], [[-1.0]], [[1]])
    loss, grad, metrics = run("m2po", inputs, log_ratio_clip=log_ratio_clip)
    assert loss == pytest.approx(math.exp(value))
    close(grad, [[math.exp(value)]])
    assert metrics["actor/ppo_kl"] == pytest.approx(-value)
    assert metrics["actor/pg_clipfrac"] == 0.0


def test_m2po_measures_the_second_moment_before_the_clamp():
    """A > 0 with log rho = 3 and 0.1: M2 = 9 and 0.01 before a clamp at 1 (1 and 0.01 after); the mean,
    4.505, and the 3 token's drop follow the unclamped values."""
    inputs = inputs_from_log_ratios([[-1.0, -1.0]], [[3.0, 0.1]], [[1.0, 1.0]], [[1, 1]])
    loss, grad, metrics = run("m2po", inputs, log_ratio_clip=1.0)
    assert metrics["actor/m2po_m2_before"] == pytest.approx(4.505)
    assert metrics["actor/m2po_masked_fraction"] == 0.5
    assert loss == pytest.approx(-math.exp(0.1) / 2)
    close(grad, [[0.0, -math.exp(0.1) / 2]])


# ratios 1.5, 0.3, 0.5, 3.5; -A log pi = 1, 2, -3, -4
REC_BATCH = ([[-1.0, -2.0, -3.0, -4.0]], [[math.log(1.5), math.log(0.3), math.log(0.5), math.log(3.5)]],
             [[1.0, 1.0, -1.0, -1.0]], [[1, 1, 1, 1]])
E = math.e


@pytest.mark.parametrize(("args", "loss", "grad"), [
    ({}, (1 + 2 - 3 - 4) / 4, [-0.25, -0.25, 0.25, 0.25]),
    # two-side keeps 0.8 <= rho <= 1.2: none
    ({"clip_mode": "two-side"}, 0.0, [0.0] * 4),
    # one-side: rho <= 1.2 where A >= 0 (token 1), rho >= 0.8 where A <= 0 (token 3)
    ({"clip_mode": "one-side"}, (2 - 4) / 4, [0.0, -0.25, 0.0, 0.25]),
    # ring: also rho <= 0.4 where A >= 0 (token 1) and rho >= 3 where A <= 0 (token 3)
    ({"clip_mode": "ring"}, (2 - 4) / 4, [0.0, -0.25, 0.0, 0.25]),
    # the response's ratio (1.5 * 0.3 * 0.5 * 3.5)^(1/4) = 0.942 is inside both one-sided bounds
    ({"clip_mode": "gspo-one-side"}, -1.0, [-0.25, -0.25, 0.25, 0.25]),
    ({"weight": "importance_sampling"}, (1.5 + 0.6 - 1.5 - 14) / 4, [-1.5 / 4, -0.3 / 4, 0.5 / 4, 3.5 / 4]),
    ({"weight": "advantage"}, (E + 2 * E - 3 / E - 4 / E) / 4, [-E / 4, -E / 4, 1 / E / 4, 1 / E / 4]),
    # rho clipped to [1 - 0.6, 1 + 2]: (1.5, 0.4, 0.5, 3.0)
    ({"weight": "truncated_importance_sampling"}, (1.5 + 0.8 - 1.5 - 12) / 4, [-1.5 / 4, -0.4 / 4, 0.5 / 4, 3 / 4]),
    # Trinity's spellings: one-side with eps_high 0.6 keeps token 0 (rho 1.5) too
    ({"clip_mode": "one-side", "epsilon_low": 0.2, "epsilon_high": 0.6}, (1 + 2 - 4) / 4, [-0.25, -0.25, 0.0, 0.25]),
    ({"clip_mode": "one-side", "clip_range_high": 0.6, "epsilon_high": 0.6}, (1 + 2 - 4) / 4,
     [-0.25, -0.25, 0.0, 0.25]),
    # ring, eps'_low 0.8 and eps'_high 1.0: nothing in the band; of the rest, only rho 3.5 >= 2 where A <= 0 (token 3)
    ({"clip_mode": "ring", "epsilon_low_prime": 0.8, "epsilon_high_prime": 1.0}, -4 / 4, [0.0, 0.0, 0.0, 0.25]),
    ({"regularizer": "forward-kl", "regularizer_coef": 0.5}, (-4 + 0.5 * 10) / 4, [-0.375, -0.375, 0.125, 0.125]),
])
def test_rec_variants(args, loss, grad):
    value, gradient, _ = run("rec", inputs_from_log_ratios(*REC_BATCH), **args)
    assert value == pytest.approx(loss)
    close(gradient, [grad])


def test_rec_fix_opd_advantage_adds_log_mu_minus_log_pi():
    log_prob, log_ratios = REC_BATCH[0][0], REC_BATCH[1][0]
    shifted = [a - r for a, r in zip(REC_BATCH[2][0], log_ratios, strict=True)]
    value, gradient, _ = run("rec", inputs_from_log_ratios(*REC_BATCH), fix_opd_advantage=True)
    assert value == pytest.approx(sum(-w * lp for w, lp in zip(shifted, log_prob, strict=True)) / 4)
    close(gradient, [[-w / 4 for w in shifted]])


def test_sppo_keeps_the_log_ratio_inside_the_band():
    batch = ([[-1.0, -2.0, -3.0]], [[math.log(1.2), math.log(0.7), math.log(1.4)]], [[2.0, 1.0, -1.0]], [[1, 1, 1]])
    # epsilon 0.3: band [1/1.3, 1.3] keeps rho 1.2 only
    value, gradient, metrics = run("sppo", inputs_from_log_ratios(*batch))
    assert value == pytest.approx(-2 * math.log(1.2) / 3)
    close(gradient, [[-2 / 3, 0.0, 0.0]])
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 3)
    # epsilon 0.5: band [2/3, 1.5] keeps all three
    value, gradient, metrics = run("sppo", inputs_from_log_ratios(*batch), epsilon=0.5)
    assert value == pytest.approx(-(2 * math.log(1.2) + math.log(0.7) - math.log(1.4)) / 3)
    close(gradient, [[-2 / 3, -1 / 3, 1 / 3]])
    assert metrics["actor/pg_clipfrac"] == 0.0


def test_rec_k2_regularizer():
    log_ratios = REC_BATCH[1][0]
    value, gradient, _ = run("rec", inputs_from_log_ratios(*REC_BATCH), regularizer="k2", regularizer_coef=0.5)
    assert value == pytest.approx(-1.0 + 0.5 * sum(r * r for r in log_ratios) / 4)
    close(gradient, [[(g + r) / 4 for g, r in zip([-1, -1, 1, 1], log_ratios, strict=True)]])


def test_dro():
    inputs = inputs_from_log_ratios([[-1.0, -2.0]], [[0.5, -1.0]], [[1.0, -1.0]], [[1, 1]])
    loss, grad, metrics = run("dro", inputs, beta=0.5)
    # -(A log pi - beta / 2 (log rho)^2): 1 + 0.0625, -2 + 0.25
    assert loss == pytest.approx((1.0625 - 1.75) / 2)
    close(grad, [[(-1 + 0.25) / 2, (1 - 0.5) / 2]])
    assert metrics["actor/ppo_kl"] == pytest.approx(0.25)


ARGS = {"dro": {"beta": 0.5}}
NEW = ["gspo", "geo_mean", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "sapo", "m2po", "rec", "dro", "sppo"]
# a one-token response, a response with a hole, a fully padded one
EDGE = ([[-0.5, -1.0, -1.0], [-0.2, -0.7, -1.5], [-1.0, -1.0, -1.0]], [[0.3, 0.0, 0.0], [-0.4, 0.0, 0.6], [0.0] * 3],
        [[1.0] * 3, [-1.0] * 3, [0.5] * 3], [[1, 0, 0], [1, 0, 1], [0, 0, 0]])


@pytest.mark.parametrize("name", NEW + ["ppo", "pg", "cispo"])
@pytest.mark.parametrize("mode", MODES)
def test_masked_inf_and_nan_reach_neither_loss_nor_gradient(name, mode):
    torch.manual_seed(0)
    clean_loss, clean_grad, _ = run(name, inputs_from_log_ratios(*EDGE), loss_agg_mode=mode, **ARGS.get(name, {}))
    poisoned = inputs_from_log_ratios(*EDGE)
    with torch.no_grad():
        poisoned.log_prob[0, 1] = math.nan
        poisoned.old_log_prob[1, 1] = math.inf
        poisoned.advantages[2, 0] = math.nan
        poisoned.old_log_prob[2, 2] = -math.inf
    torch.manual_seed(0)
    loss, grad, metrics = run(name, poisoned, loss_agg_mode=mode, **ARGS.get(name, {}))
    assert loss == pytest.approx(clean_loss)
    close(grad, clean_grad.tolist())
    assert grad[0, 1] == 0 and grad[1, 1] == 0 and (grad[2] == 0).all()
    assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("mode", MODES)
def test_empty_batch_gives_zero(name, mode):
    inputs = inputs_from_log_ratios([[-1.0, -1.0]], [[0.3, -0.2]], [[1.0, 1.0]], [[0, 0]])
    loss, grad, metrics = run(name, inputs, loss_agg_mode=mode, **ARGS.get(name, {}))
    assert loss == 0.0 and (grad == 0).all()
    assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", NEW)
def test_reports_verl_metrics(name):
    _, _, metrics = run(name, inputs_from_log_ratios(*EDGE), **ARGS.get(name, {}))
    assert {"actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl"} <= set(metrics)


@pytest.mark.parametrize(("name", "args", "match"), [
    ("gspo", {"clip_range_low": 0.0}, "clip_range_low must be > 0"),
    ("geo_mean", {"clip_range_high": -1.0}, "clip_range_high must be > 0"),
    ("clip_cov", {"clip_cov_ratio": 0.0}, "clip_cov_ratio must be > 0"),
    ("kl_cov", {"ppo_kl_coef": -1.0}, "ppo_kl_coef must be >= 0"),
    ("dppo_kl", {"clip_ratio_c": 0.0}, "clip_ratio_c must be > 0"),
    ("sapo", {"tau_neg": 0.0}, "tau_neg must be > 0"),
    ("m2po", {"m2_threshold": -0.1}, "m2_threshold must be a finite number >= 0"),
    ("m2po", {"log_ratio_clip": 0.0}, "log_ratio_clip must be > 0"),
    ("rec", {"clip_mode": "both"}, "clip_mode: 'both' is not a 'rec' choice"),
    ("rec", {"clip_range_low": 1.5}, "must be <= 1"),
    ("rec", {"temp": 0.0}, "temp must be > 0"),
    ("rec", {"clip_range_low": 0.2, "epsilon_low": 0.3}, "clip_range_low=0.2 and epsilon_low=0.3 name the same"),
    ("rec", {"epsilon_low_prime": 1.5}, "must be <= 1"),
    ("sppo", {"epsilon": 0.0}, "epsilon must be > 0"),
    ("dro", {}, "beta: 'dro' needs a positive beta"),
])
def test_bad_arguments_name_the_key(name, args, match):
    with pytest.raises(ConfigError, match=f"algorithm.policy_loss_fn_args.*{match}"):
        POLICY_LOSS_FNS.get(name)(inputs_from_log_ratios(*EDGE), **args)


def test_importance_sampling_is_minus_the_advantage_times_the_unclipped_ratio():
    # Trinity-RFT's importance_sampling: l = -A exp(log pi - log mu), no clip; token-mean here
    inputs = inputs_from_log_ratios([[-1.0, -1.0]], [[0.5, 30.0]], [[2.0, -1.0]], [[1, 1]])
    loss, grad, metrics = run("importance_sampling", inputs)
    r0, r1 = math.exp(0.5), math.exp(20.0)  # the log-ratio is clamped to +-20
    assert loss == pytest.approx((-2.0 * r0 + 1.0 * r1) / 2)
    close(grad, [[-2.0 * r0 / 2, 0.0]])  # the clamp holds token 1: no gradient there
    assert metrics["actor/ratio_mean"] == pytest.approx((r0 + r1) / 2)
    assert metrics["actor/pg_clipfrac"] == 0.0


SEQ_MASK_BATCH = ([[-1.0, -1.0], [-1.0, -1.0]], [[-0.3, -0.1], [0.05, -0.05]], [[-1.0, -1.0], [1.0, -1.0]],
                  [[1, 1], [1, 1]])


def test_ppo_sequence_masking_zeroes_negative_advantages_of_responses_far_from_the_old_policy():
    # Trinity-RFT's enable_sequence_masking: row 0's mean token KL (0.3 + 0.1) / 2 = 0.2 > 0.1 and A < 0:
    # both its tokens give 0 (still counted by token-mean); row 1 (KL 0) is plain PPO
    loss, grad, metrics = run("ppo", inputs_from_log_ratios(*SEQ_MASK_BATCH), enable_sequence_masking=True)
    assert loss == pytest.approx((-math.exp(0.05) + math.exp(-0.05)) / 4)
    close(grad, [[0.0, 0.0], [-math.exp(0.05) / 4, math.exp(-0.05) / 4]])
    assert metrics["actor/seq_mask/masked_tokens"] == 0.5
    assert metrics["actor/seq_mask/mean_sequence_kl"] == pytest.approx(0.1)
    # A threshold above row 0's KL keeps it
    loss, _, _ = run("ppo", inputs_from_log_ratios(*SEQ_MASK_BATCH), enable_sequence_masking=True,
                     delta_sequence_masking=0.25)
    # (row 0, token 0: rho = e^-0.3 < 0.8 with A < 0, so the clipped -A * 0.8 wins)
    assert loss == pytest.approx((0.8 + math.exp(-0.1) - math.exp(0.05) + math.exp(-0.05)) / 4)


def test_ppo_fallback_to_policy_gradient_ignores_the_old_policy():
    loss, grad, metrics = run("ppo", inputs_from_log_ratios(*SEQ_MASK_BATCH), fallback_to_policy_gradient=True)
    assert loss == pytest.approx((1 + 1 - 1 + 1) / 4)  # rho = 1: the loss is mean(-A)
    close(grad, [[0.25, 0.25], [-0.25, 0.25]])
    assert metrics["actor/ppo_kl"] == 0.0 and metrics["actor/pg_clipfrac"] == 0.0
