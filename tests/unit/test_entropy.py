"""Entropy from logits and the entropy bonus."""

import math

import pytest
import torch

from rfthpc.algorithms import ENTROPY_LOSS_FNS
from rfthpc.algorithms.entropy import entropy_from_logits


def test_entropy_values():
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]])  # p = (1/2, 1/2) and (1/4, 3/4)
    expected = [math.log(2.0), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]
    assert entropy_from_logits(logits).tolist() == pytest.approx(expected)


def test_entropy_shift_invariant_and_stable_for_large_logits():
    assert entropy_from_logits(torch.tensor([1000.0, 1000.0])).item() == pytest.approx(math.log(2.0))
    peaked = entropy_from_logits(torch.tensor([1000.0, 0.0]))
    assert peaked.item() == 0.0


def test_entropy_with_masked_vocabulary():
    logits = torch.tensor([-math.inf, 0.0, 0.0], requires_grad=True)
    entropy = entropy_from_logits(logits)
    entropy.backward()
    assert entropy.item() == pytest.approx(math.log(2.0))
    assert all(math.isfinite(g) for g in logits.grad.tolist())


def test_half_precision_logits_are_widened():
    assert entropy_from_logits(torch.zeros(4, dtype=torch.bfloat16)).dtype == torch.float32


ENTROPY = torch.tensor([[0.5, 1.5], [1.0, 9.0]])
MASK = torch.tensor([[1, 1], [1, 0]])


def test_entropy_bonus():
    entropy = ENTROPY.clone().requires_grad_(True)
    term, metrics = ENTROPY_LOSS_FNS.get("default")(entropy, MASK, entropy_coef=0.01)
    term.backward()
    # token-mean entropy (0.5 + 1.5 + 1.0) / 3 = 1; the term to add to the loss is -0.01 * 1
    assert term.item() == pytest.approx(-0.01)
    assert metrics == {"actor/entropy": pytest.approx(1.0)}
    torch.testing.assert_close(entropy.grad, torch.tensor([[-0.01 / 3, -0.01 / 3], [-0.01 / 3, 0.0]]))


def test_entropy_bonus_seq_mean():
    term, metrics = ENTROPY_LOSS_FNS.get("basic")(ENTROPY, MASK, entropy_coef=1.0, loss_agg_mode="seq-mean-token-mean")
    assert metrics["actor/entropy"] == pytest.approx((1.0 + 1.0) / 2)
    assert term.item() == pytest.approx(-1.0)


def test_no_entropy_bonus_still_reports_entropy():
    term, metrics = ENTROPY_LOSS_FNS.get("none")(ENTROPY, MASK)
    assert term.item() == 0.0
    assert metrics == {"actor/entropy": pytest.approx(1.0)}
