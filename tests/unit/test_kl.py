"""KL estimators, controllers, reward penalty and KL loss against hand-computed numbers."""

import math

import pytest
import torch

from rfthpc.algorithms.kl import KL_FNS, apply_kl_penalty, kl_loss
from rfthpc.algorithms.kl_control import AdaptiveKLController, FixedKLController, make_kl_controller
from rfthpc.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "p_above_q", "q_above_p"),
    [
        # log p - log q = +1 and -1; k3 = e^{log q - log p} - (log q - log p) - 1
        ("k1", 1.0, -1.0),
        ("kl", 1.0, -1.0),
        ("k2", 0.5, 0.5),
        ("mse", 0.5, 0.5),
        ("k3", math.exp(-1), math.e - 2),
        ("low_var_kl", math.exp(-1), math.e - 2),
        ("abs", 1.0, 1.0),
        ("none", 0.0, 0.0),
    ],
)
def test_estimators(name, p_above_q, q_above_p):
    estimate = KL_FNS.get(name)(torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -1.0]))
    assert estimate.tolist() == pytest.approx([p_above_q, q_above_p])


def test_k3_is_clamped_for_stability():
    # log q - log p = -100 is clamped to -20: e^-20 + 20 - 1 > 10, so the result is clamped to 10
    assert KL_FNS.get("k3")(torch.tensor([0.0]), torch.tensor([-100.0])).item() == 10.0


def test_fixed_controller_ignores_kl():
    controller = FixedKLController(0.1)
    controller.update(current_kl=5.0, n_steps=100)
    assert controller.value == 0.1


@pytest.mark.parametrize(
    ("current_kl", "expected"),
    [
        (0.02, 0.1 * (1 + 0.2 * 10 / 100)),  # error 1 clipped to 0.2
        (0.011, 0.1 * (1 + 0.1 * 10 / 100)),  # error 0.1 inside the clip
        (0.0, 0.1 * (1 - 0.2 * 10 / 100)),  # error -1 clipped to -0.2
    ],
)
def test_adaptive_controller(current_kl, expected):
    controller = AdaptiveKLController(kl_coef=0.1, target_kl=0.01, horizon=100)
    controller.update(current_kl=current_kl, n_steps=10)
    assert controller.value == pytest.approx(expected)


def test_make_kl_controller():
    assert isinstance(make_kl_controller(kl_coef=0.2), FixedKLController)
    adaptive = make_kl_controller(kl_coef=0.2, adaptive=True, target_kl=0.1, horizon=1000)
    assert isinstance(adaptive, AdaptiveKLController) and adaptive.value == 0.2


def test_adaptive_controller_needs_target_and_horizon():
    with pytest.raises(ConfigError, match="adaptive KL needs target_kl > 0 and horizon > 0"):
        make_kl_controller(adaptive=True, target_kl=0.1)


SCORES = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
OLD = torch.full((2, 3), -1.0)
REF = torch.tensor([[-2.0, -1.0, -1.0], [-1.0, -3.0, -5.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the KL of 4 on the padding must not count


def test_kl_penalty_in_reward():
    rewards, metrics = apply_kl_penalty(SCORES, OLD, REF, MASK, kl_fn="k1", controller=FixedKLController(0.1))
    # k1 = [[1, 0, 0], [0, 2, -]]; r = s - 0.1 * k1
    torch.testing.assert_close(rewards, torch.tensor([[-0.1, 0.0, 1.0], [0.0, 1.8, 0.0]]))
    # batch KL: mean over responses of their mean token KL = (1/3 + 2/2) / 2
    assert metrics == {"critic/kl": pytest.approx((1 / 3 + 1.0) / 2), "critic/kl_coeff": 0.1}


def test_kl_penalty_updates_adaptive_controller_after_use():
    controller = AdaptiveKLController(kl_coef=0.1, target_kl=1.0, horizon=10)
    _, metrics = apply_kl_penalty(SCORES, OLD, REF, MASK, kl_fn="k1", controller=controller)
    assert metrics["critic/kl_coeff"] == 0.1  # this batch used the coefficient from before the update
    # error 2/3 - 1 clipped to -0.2; n_steps = batch size 2
    assert controller.value == pytest.approx(0.1 * (1 - 0.2 * 2 / 10))


def test_kl_penalty_none_keeps_rewards():
    rewards, metrics = apply_kl_penalty(SCORES, OLD, REF, MASK, kl_fn="none", controller=FixedKLController(0.1))
    assert torch.equal(rewards, SCORES)
    assert metrics["critic/kl"] == 0.0


def test_kl_loss_k2():
    log_prob = torch.tensor([[-1.0, -2.0, -7.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -2.0, 0.0]])
    loss, metrics = kl_loss(log_prob, ref, torch.tensor([[1, 1, 0]]), kl_fn="k2", kl_coef=0.5)
    loss.backward()
    # k2 = [0.5, 0]; token-mean 0.25; loss 0.5 * 0.25; gradient 0.5 * (log p - log q) / 2
    assert loss.item() == pytest.approx(0.125)
    assert metrics == {"actor/kl_loss": pytest.approx(0.25), "actor/kl_coef": 0.5}
    assert log_prob.grad.tolist() == [[0.25, 0.0, 0.0]]


def test_kl_loss_seq_mean_token_sum():
    loss, _ = kl_loss(
        torch.tensor([[-1.0, -1.0], [-1.0, -1.0]]),
        torch.tensor([[-2.0, -3.0], [-2.0, 0.0]]),
        torch.tensor([[1, 1], [1, 0]]),
        kl_fn="k1",
        kl_coef=1.0,
        loss_agg_mode="seq-mean-token-sum",
    )
    assert loss.item() == pytest.approx(((1 + 2) + 1) / 2)


def test_kl_loss_none_is_zero():
    loss, metrics = kl_loss(torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), kl_fn="none")
    assert loss.item() == 0.0 and metrics["actor/kl_loss"] == 0.0


def test_unknown_estimator_lists_names():
    with pytest.raises(ConfigError, match=r"known: abs, abs\+, corrected_k3, k1, k1\+, k2, k2\+, k3, k3\+, kl, kl\+, low_var_kl, low_var_kl\+, mse, mse\+, none"):
        kl_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), kl_fn="k4")


# Inputs and outputs of veRL 0.9.1's `verl.trainer.ppo.core_algos.kl_penalty(logprob, ref_logprob, name)`
# (float64; gradients of the sum over every entry). The row [-2.0, -30.0] vs [-2.0, -0.5] holds a
# zero difference and a difference beyond k3's clamps.
VERL_LOG_PROB = [[-0.5, -1.25, -3.0], [-2.0, -0.125, -30.0]]
VERL_REF = [[-1.0, -1.0, -0.25], [-2.0, -4.0, -0.5]]
VERL_K1 = [[0.5, -0.25, -2.75], [0.0, 3.875, -29.5]]
VERL_ABS = [[0.5, 0.25, 2.75], [0.0, 3.875, 29.5]]
VERL_K2 = [[0.125, 0.03125, 3.78125], [0.0, 7.5078125, 435.125]]
VERL_K3 = [[0.1065306597, 0.0340254167, 10.0], [0.0, 2.8957543379, 10.0]]
VERL_ONES = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
VERL_D_ABS = [[1.0, -1.0, -1.0], [0.0, 1.0, -1.0]]
VERL_D_K3 = [[0.3934693403, -0.2840254167, 0.0], [0.0, 0.9792456621, 0.0]]
VERL_D_K2 = VERL_K1  # d k2 / d log p = log p - log q


@pytest.mark.parametrize(
    ("name", "value", "d_log_prob"),
    [
        ("kl", VERL_K1, VERL_ONES), ("k1", VERL_K1, VERL_ONES),
        ("abs", VERL_ABS, VERL_D_ABS),
        ("mse", VERL_K2, VERL_D_K2), ("k2", VERL_K2, VERL_D_K2),
        ("low_var_kl", VERL_K3, VERL_D_K3), ("k3", VERL_K3, VERL_D_K3),
        ("k1+", VERL_K1, VERL_D_K2), ("kl+", VERL_K1, VERL_D_K2),
        ("k3+", VERL_K3, VERL_D_K2), ("low_var_kl+", VERL_K3, VERL_D_K2),
        ("abs+", VERL_ABS, VERL_D_K2),
        ("k2+", VERL_K2, VERL_D_K2), ("mse+", VERL_K2, VERL_D_K2),
    ],
)
def test_estimators_equal_verls_values_and_gradients(name, value, d_log_prob):
    log_prob = torch.tensor(VERL_LOG_PROB, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor(VERL_REF, dtype=torch.float64, requires_grad=True)
    estimate = KL_FNS.get(name)(log_prob, ref)
    estimate.sum().backward()
    expected = torch.tensor(value, dtype=torch.float64)
    torch.testing.assert_close(estimate.detach(), expected, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(log_prob.grad, torch.tensor(d_log_prob, dtype=torch.float64), rtol=1e-5, atol=1e-9)
    # Every estimator depends on log p - log q alone, so the reference's gradient is the opposite.
    torch.testing.assert_close(ref.grad, -log_prob.grad, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["k1+", "k3+", "abs+"])
def test_straight_through_kl_loss_has_the_k2_loss_gradient(name):
    """As a loss term, a `+` estimator reports its own KL and trains like k2; padding stays out
    (the inf at a masked position would otherwise turn the gradient into NaN)."""
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    ref = torch.tensor(VERL_REF)
    ref[0, 2] = -math.inf
    grads, values = {}, {}
    for fn in (name, "k2", name.rstrip("+")):
        log_prob = torch.tensor(VERL_LOG_PROB, requires_grad=True)
        term, metrics = kl_loss(log_prob, ref, mask, kl_fn=fn, kl_coef=0.5)
        term.backward()
        grads[fn], values[fn] = log_prob.grad, metrics["actor/kl_loss"]
    assert values[name] == pytest.approx(values[name.rstrip("+")])
    torch.testing.assert_close(grads[name], grads["k2"])
    assert grads[name][0, 2].item() == 0.0 and grads[name][1, 0].item() == 0.0


def test_corrected_k3_weights_k3_by_the_clamped_ratio_to_the_old_policy():
    # Trinity-RFT's corrected_k3: clamp(exp(log p - log p_old), 0, 2) * (q/p - log(q/p) - 1)
    log_p = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    ref, old = torch.tensor([[-1.5, -1.5]]), torch.tensor([[-1.2, -2.0]])
    k3 = math.exp(-0.5) + 0.5 - 1
    term, metrics = kl_loss(log_p, ref, torch.ones(1, 2), kl_fn="corrected_k3", kl_coef=1.0, old_log_prob=old)
    assert metrics["actor/kl_loss"] == pytest.approx((math.exp(0.2) * k3 + 2.0 * k3) / 2)  # e^1 clamped at 2
    term.backward()
    # d/d log p of r k3 (r = e^(log p - log p_old), unclamped on token 0): r k3 + r (1 - q/p); token 1: 2 (1 - q/p)
    r0 = math.exp(0.2)
    torch.testing.assert_close(log_p.grad, torch.tensor([[(r0 * k3 + r0 * (1 - math.exp(-0.5))) / 2,
                                                          2 * (1 - math.exp(-0.5)) / 2]]))
    # Without the old policy (as a reward penalty): k3 itself.
    plain, _ = kl_loss(log_p, ref, torch.ones(1, 2), kl_fn="corrected_k3", kl_coef=1.0)
    assert plain.item() == pytest.approx(k3)
    scores = torch.zeros(1, 2)
    rewards, _ = apply_kl_penalty(scores, log_p.detach(), ref, torch.ones(1, 2), kl_fn="corrected_k3",
                                  controller=FixedKLController(1.0))
    torch.testing.assert_close(rewards, torch.full((1, 2), -k3))
