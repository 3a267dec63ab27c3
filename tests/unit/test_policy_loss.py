"""Policy losses against hand-computed losses, gradients and metrics."""

import math

import pytest
import torch

from rfthpc.algorithms import LOSS_AGG_MODES, POLICY_LOSS_FNS
from rfthpc.algorithms.policy_loss import PolicyLossInputs
from rfthpc.errors import ConfigError


def close(actual, expected, abs=1e-9):
    """Element-wise closeness of nested lists (pytest.approx does not nest)."""
    torch.testing.assert_close(
        torch.tensor(actual, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64), atol=abs, rtol=1e-6
    )


def inputs_from_ratios(log_prob, ratios, advantages, mask, rewards=None):
    """Inputs where pi / mu equals `ratios` token by token; log_prob is a leaf that records gradients."""
    log_prob = torch.tensor(log_prob, dtype=torch.float64, requires_grad=True)
    old = log_prob.detach() - torch.log(torch.tensor(ratios, dtype=torch.float64))
    return PolicyLossInputs(
        log_prob=log_prob,
        response_mask=torch.tensor(mask),
        old_log_prob=old,
        advantages=torch.tensor(advantages, dtype=torch.float64),
        rewards=None if rewards is None else torch.tensor(rewards, dtype=torch.float64),
    )


def loss_and_grad(name, inputs, **args):
    loss, metrics = POLICY_LOSS_FNS.get(name)(inputs, **args)
    loss.backward()
    return loss.item(), inputs.log_prob.grad.tolist(), metrics


# Row 0 has A = +1 (ratios 1.5 clipped, 0.5 and 1.1 not); row 1 has A = -1 (ratio 4 hits the dual
# clip bound 3, ratio 0.5 is clipped to 0.8); the third token of row 1 is padding.
PPO_BATCH = dict(
    log_prob=[[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]],
    ratios=[[1.5, 0.5, 1.1], [4.0, 0.5, 1.3]],
    advantages=[[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]],
    mask=[[1, 1, 1], [1, 1, 0]],
)


def test_ppo_clip_and_dual_clip():
    loss, grad, metrics = loss_and_grad("ppo", inputs_from_ratios(**PPO_BATCH))
    # token losses: -1.2 (clipped), -0.5, -1.1 | 3.0 (dual clip), 0.8 (clipped)
    assert loss == pytest.approx((-1.2 - 0.5 - 1.1 + 3.0 + 0.8) / 5)
    # clipped tokens carry no gradient; the others -A * ratio / 5
    close(grad, [[0.0, -0.5 / 5, -1.1 / 5], [0.0, 0.0, 0.0]])
    assert metrics["actor/pg_loss"] == pytest.approx(loss)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 5)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 5)
    assert metrics["actor/ppo_kl"] == pytest.approx(-math.log(1.5 * 0.5 * 1.1 * 4.0 * 0.5) / 5)


def test_ppo_seq_mean_token_mean():
    loss, _, _ = loss_and_grad("ppo", inputs_from_ratios(**PPO_BATCH), loss_agg_mode="seq-mean-token-mean")
    assert loss == pytest.approx(((-1.2 - 0.5 - 1.1) / 3 + (3.0 + 0.8) / 2) / 2)


def test_ppo_asymmetric_clip_range():
    batch = dict(log_prob=[[-1.0]], ratios=[[1.25]], advantages=[[1.0]], mask=[[1]])
    symmetric, _, sym_metrics = loss_and_grad("ppo", inputs_from_ratios(**batch), clip_range=0.2)
    higher, _, high_metrics = loss_and_grad("ppo", inputs_from_ratios(**batch), clip_range=0.2, clip_range_high=0.28)
    assert symmetric == pytest.approx(-1.2) and sym_metrics["actor/pg_clipfrac"] == 1.0
    assert higher == pytest.approx(-1.25) and high_metrics["actor/pg_clipfrac"] == 0.0


def test_ppo_rejects_clip_ratio_c_not_above_one():
    with pytest.raises(ConfigError, match="clip_ratio_c must be > 1"):
        POLICY_LOSS_FNS.get("ppo")(inputs_from_ratios(**PPO_BATCH), clip_ratio_c=1.0)


PG_BATCH = dict(
    log_prob=[[-1.0, -2.0], [-0.5, -3.0]],
    ratios=[[1.0, 1.0], [1.0, 1.0]],
    advantages=[[2.0, 2.0], [-1.0, -1.0]],
    mask=[[1, 1], [1, 0]],
)


@pytest.mark.parametrize("name", ["pg", "vanilla"])
def test_plain_policy_gradient(name):
    loss, grad, metrics = loss_and_grad(name, inputs_from_ratios(**PG_BATCH))
    # -A log pi: 2, 4, -0.5 over 3 tokens; gradient -A / 3
    assert loss == pytest.approx((2 + 4 - 0.5) / 3)
    close(grad, [[-2 / 3, -2 / 3], [1 / 3, 0.0]])
    assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/ppo_kl"] == pytest.approx(0.0)


def test_sft_needs_only_log_prob():
    log_prob = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    loss, metrics = POLICY_LOSS_FNS.get("sft")(PolicyLossInputs(log_prob, torch.tensor([[1, 1], [1, 0]])))
    loss.backward()
    assert loss.item() == pytest.approx((1 + 2 + 0.5) / 3)
    close(log_prob.grad.tolist(), [[-1 / 3, -1 / 3], [-1 / 3, 0.0]])
    assert metrics == {"actor/sft_loss": pytest.approx(3.5 / 3)}


def test_opmd_divides_by_one_plus_tau():
    loss, grad, _ = loss_and_grad("opmd", inputs_from_ratios(**PG_BATCH), tau=3.0)
    assert loss == pytest.approx((2 + 4 - 0.5) / 3 / 4)
    close(grad, [[-2 / 12, -2 / 12], [1 / 12, 0.0]])


TIS_BATCH = dict(log_prob=[[-1.0, -2.0]], ratios=[[0.5, 2.0]], advantages=[[1.0, 1.0]], mask=[[1, 1]])


def test_tis_truncates_detached_ratio():
    loss, grad, metrics = loss_and_grad("tis", inputs_from_ratios(**TIS_BATCH))
    # weights clip(0.5, 0, 1) = 0.5 and clip(2, 0, 1) = 1: tokens 0.5 * 1 and 1 * 2
    assert loss == pytest.approx((0.5 + 2.0) / 2)
    close(grad, [[-0.5 / 2, -1.0 / 2]])  # the weight is a constant
    assert metrics["actor/tis_upper_clipfrac"] == 0.5
    assert metrics["actor/tis_lower_clipfrac"] == 0.0
    assert metrics["actor/tis_total_clipfrac"] == metrics["actor/pg_clipfrac"] == 0.5
    assert metrics["actor/tis_clipped_ratio_mean"] == pytest.approx(0.75)


def test_tis_custom_bounds():
    loss, _, metrics = loss_and_grad("tis", inputs_from_ratios(**TIS_BATCH), lower_bound=0.8, upper_bound=1.5)
    assert loss == pytest.approx((0.8 * 1 + 1.5 * 2) / 2)
    assert metrics["actor/tis_lower_clipfrac"] == metrics["actor/pg_clipfrac_lower"] == 0.5
    assert metrics["actor/tis_upper_clipfrac"] == 0.5


def test_tis_rejects_inverted_bounds():
    with pytest.raises(ConfigError, match="lower_bound 2 exceeds upper_bound 1"):
        POLICY_LOSS_FNS.get("tis")(inputs_from_ratios(**TIS_BATCH), lower_bound=2, upper_bound=1)


# Response 0 is positive (reward 1, A = 0.5), response 1 negative (reward 0, A = -0.5).
TOPR_BATCH = dict(
    log_prob=[[-1.0, -1.0], [-2.0, -2.0]],
    ratios=[[2.0, 0.5], [2.0, 0.5]],
    advantages=[[0.5, 0.5], [-0.5, -0.5]],
    mask=[[1, 1], [1, 1]],
    rewards=[1.0, 0.0],
)


def test_topr():
    loss, grad, metrics = loss_and_grad("topr", inputs_from_ratios(**TOPR_BATCH), advantage_threshold=None)
    # positive: -A log pi = 0.5, 0.5 (no ratio); negative: -clip(rho,0,1) A log pi = -1.0, -0.5
    assert loss == pytest.approx((0.5 + 0.5 - 1.0 - 0.5) / 4)
    close(grad, [[-0.5 / 4, -0.5 / 4], [0.5 / 4, 0.25 / 4]])
    assert metrics["actor/topr_positive_samples"] == 1.0
    assert metrics["actor/topr_negative_samples"] == 1.0
    assert metrics["actor/topr_negative_total_clipfrac"] == metrics["actor/pg_clipfrac"] == 0.25


def test_topr_weights():
    loss, _, _ = loss_and_grad("topr", inputs_from_ratios(**TOPR_BATCH), positive_weight=3.0, negative_weight=2.0)
    assert loss == pytest.approx((3 * (0.5 + 0.5) + 2 * (-1.0 - 0.5)) / 4)


def test_topr_split_by_reward_needs_rewards():
    batch = dict(TOPR_BATCH, rewards=None)
    with pytest.raises(ConfigError, match="'topr' needs sequence rewards"):
        POLICY_LOSS_FNS.get("topr")(inputs_from_ratios(**batch), advantage_threshold=None)


# Advantages that disagree with the rewards' sign, so the two splits differ.
TOPR_MIXED = dict(TOPR_BATCH, advantages=[[0.5, -0.5], [0.3, -0.2]], rewards=[1.0, 0.0])


def trinity_topr(log_prob, ratios, advantages, mask, threshold):
    """Trinity-RFT 0.6.0's topr loss written out: alpha = clip(rho, 0, 1) where A <= threshold, else 1;
    the masked mean of -sg(alpha) A log pi over every response token."""
    lp, rho, adv, m = (torch.tensor(x, dtype=torch.float64) for x in (log_prob, ratios, advantages, mask))
    alpha = torch.where(adv <= threshold, rho.clamp(0.0, 1.0), torch.ones_like(rho))
    return float((-alpha * adv * lp * m).sum() / m.sum())


@pytest.mark.parametrize("threshold", [0.0, 0.25, -0.3])
def test_topr_matches_trinity_split_by_advantage(threshold):
    batch = dict(TOPR_MIXED, rewards=None)  # Trinity's loss reads no rewards
    loss, _, metrics = loss_and_grad("topr", inputs_from_ratios(**batch), advantage_threshold=threshold)
    expected = trinity_topr(batch["log_prob"], batch["ratios"], batch["advantages"], batch["mask"], threshold)
    assert loss == pytest.approx(expected, rel=1e-6)
    assert "actor/topr_avg_alpha" in metrics and "actor/topr_positive_samples" not in metrics


def test_topr_splits_differ_where_advantage_and_reward_disagree():
    by_advantage, _, _ = loss_and_grad("topr", inputs_from_ratios(**TOPR_MIXED))
    by_reward, _, metrics = loss_and_grad("topr", inputs_from_ratios(**TOPR_MIXED), advantage_threshold=None)
    # reward split: row 0 whole (-A log pi), row 1 tapered by clip(rho, 0, 1) = 1.0, 0.5
    assert by_reward == pytest.approx((0.5 - 0.5 + 0.6 - 0.5 * 0.4) / 4)
    # advantage split: tokens with A <= 0 tapered: row 0 token 1 (rho 0.5), row 1 token 1 (rho 0.5)
    assert by_advantage == pytest.approx((0.5 - 0.25 + 0.6 - 0.5 * 0.4) / 4)
    assert metrics["actor/topr_positive_samples"] == 1.0


CISPO_BATCH = dict(
    log_prob=[[-1.0, -1.0, -1.0, -1.0]],
    ratios=[[1.5, 0.5, 1.05, 0.5]],
    advantages=[[1.0, -1.0, 1.0, 1.0]],
    mask=[[1, 1, 1, 1]],
)


def test_cispo():
    loss, grad, metrics = loss_and_grad("cispo", inputs_from_ratios(**CISPO_BATCH))
    # weights clip(rho, 0.9, 1.1) = 1.1, 0.9, 1.05, 0.9; token loss -w A log pi = w A
    assert loss == pytest.approx((1.1 - 0.9 + 1.05 + 0.9) / 4)
    close(grad, [[-1.1 / 4, 0.9 / 4, -1.05 / 4, -0.9 / 4]])
    assert metrics["actor/cispo_lower_clipfrac"] == 0.5
    assert metrics["actor/cispo_upper_clipfrac"] == 0.25
    assert metrics["actor/cispo_total_clipfrac"] == 0.75


def test_cispo_unified_mask_drops_tokens_ppo_would_silence():
    loss, grad, metrics = loss_and_grad("cispo", inputs_from_ratios(**CISPO_BATCH), use_unified_mask=True)
    # dropped: A > 0 with rho > 1.1 (token 0) and A < 0 with rho < 0.9 (token 1)
    assert loss == pytest.approx((1.05 + 0.9) / 4)
    close(grad, [[0.0, 0.0, -1.05 / 4, -0.9 / 4]])
    assert metrics["actor/cispo_kept_tokens"] == 0.5


def test_cispo_preset_is_trinitys_loss():
    """Trinity-RFT's cispo: weights clamp(rho, 1 - 1.0, 1 + 0.28), and tokens dropped where rho > 1.28 with
    A > 0 or rho < 0 with A < 0 (never), averaged over every response token."""
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS

    args = ALGORITHM_PRESETS["cispo"]["policy_loss_fn_args"]
    loss, grad, _ = loss_and_grad("cispo", inputs_from_ratios(**CISPO_BATCH), **args)
    # weights 1.28, 0.5, 1.05, 0.5; token 0 (rho 1.5, A > 0) dropped; token loss w A (log pi = -1)
    assert loss == pytest.approx((-0.5 + 1.05 + 0.5) / 4)
    close(grad, [[0.0, 0.5 / 4, -1.05 / 4, -0.5 / 4]])


def test_kimi15():
    inputs = PolicyLossInputs(
        log_prob=torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True),
        response_mask=torch.tensor([[1, 1]]),
        old_log_prob=torch.tensor([[-1.5, -1.0]], dtype=torch.float64),
        advantages=torch.tensor([[1.0, -1.0]], dtype=torch.float64),
    )
    loss, grad, metrics = loss_and_grad("kimi15", inputs, tau=0.1)
    # -A log pi + 0.05 (log pi - log mu)^2: 1 + 0.05 * 0.25 and -2 + 0.05 * 1
    assert loss == pytest.approx((1.0125 - 1.95) / 2)
    # -A + tau (log pi - log mu)
    close(grad, [[(-1 + 0.05) / 2, (1 - 0.1) / 2]])
    assert metrics["actor/ppo_kl"] == pytest.approx((-0.5 + 1.0) / 2)
    assert metrics["actor/kimi15_policy_grad_magnitude"] == pytest.approx((0.5 + 1.0) / 2)
    assert metrics["actor/kimi15_kl_reg_magnitude"] == pytest.approx(0.05 * (0.25 + 1.0) / 2)


@pytest.mark.parametrize("name", ["ppo", "pg", "sft", "opmd", "tis", "topr", "cispo", "kimi15"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_empty_responses_give_zero_loss_not_nan(name, mode):
    batch = dict(TOPR_BATCH, mask=[[0, 0], [0, 0]])
    inputs = inputs_from_ratios(**batch)
    loss, grad, metrics = loss_and_grad(name, inputs, loss_agg_mode=mode)
    assert loss == 0.0
    assert grad == [[0.0, 0.0], [0.0, 0.0]]
    assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", ["ppo", "pg", "opmd", "tis", "topr", "cispo", "kimi15"])
def test_reports_verl_metrics(name):
    _, _, metrics = loss_and_grad(name, inputs_from_ratios(**TOPR_BATCH))
    assert {"actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl"} <= set(metrics)


def test_ratio_of_a_very_stale_sample_stays_finite():
    inputs = PolicyLossInputs(
        log_prob=torch.tensor([[0.0]], requires_grad=True),
        response_mask=torch.tensor([[1]]),
        old_log_prob=torch.tensor([[-500.0]]),
        advantages=torch.tensor([[1.0]]),
    )
    loss, grad, _ = loss_and_grad("tis", inputs, upper_bound=math.inf)
    assert loss == 0.0  # -w A log pi with log pi = 0
    assert grad[0][0] == pytest.approx(-math.exp(20.0), rel=1e-6)  # rho is capped at e^20
