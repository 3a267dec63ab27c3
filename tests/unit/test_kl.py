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
    with pytest.raises(ConfigError, match="known: abs, k1, k2, k3, kl, low_var_kl, mse, none"):
        kl_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), kl_fn="k4")
