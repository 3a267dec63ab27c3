"""Clipped PPO value loss against hand-computed numbers."""

import pytest
import torch

from rfthpc.algorithms.critic import value_loss


def test_clipped_value_loss():
    vpreds = torch.tensor([[1.0, 0.2, 5.0]], requires_grad=True)
    values = torch.tensor([[0.0, 0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 0]])  # the third token is padding
    loss, metrics = value_loss(vpreds, values, returns, mask, cliprange_value=0.5)
    loss.backward()
    # token 0: v clipped to 0.5: max((1-1)^2, (0.5-1)^2) = 0.25 (clipped term wins)
    # token 1: 0.2 is inside [-0.5, 0.5]: both terms (0.2-1)^2 = 0.64
    assert loss.item() == pytest.approx(0.5 * (0.25 + 0.64) / 2)
    assert metrics["critic/vf_loss"] == pytest.approx(loss.item())
    assert metrics["critic/vf_clipfrac"] == pytest.approx(0.5)
    assert metrics["critic/vpred_mean"] == pytest.approx(0.6)
    # token 0's loss is the clipped constant; token 1: 0.5 * 2 (v - G) / 2 tokens
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, 0.5 * 2 * (0.2 - 1.0) / 2, 0.0]]))


def test_value_loss_of_empty_batch_is_zero():
    vpreds = torch.tensor([[3.0]], requires_grad=True)
    loss, metrics = value_loss(vpreds, torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1))
    assert loss.item() == 0.0 and metrics["critic/vf_clipfrac"] == 0.0
