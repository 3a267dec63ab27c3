"""Loss aggregation modes, masked mean and whitening, checked against hand-computed numbers."""

import math

import pytest
import torch

from rfthpc.algorithms.aggregation import aggregate_loss, aggregation_count, masked_mean, masked_whiten
from rfthpc.errors import ConfigError

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # third response is empty


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("seq-mean-token-mean", ((1 + 2) / 2 + 4 / 1) / 2),  # the empty response is not a sequence
        ("seq-mean-token-sum", ((1 + 2) + 4) / 2),
    ],
)
def test_modes(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_masked_inf_and_nan_do_not_leak(mode):
    poisoned = LOSS.clone()
    poisoned[0, 2] = math.inf
    poisoned[2, 0] = math.nan
    assert aggregate_loss(poisoned, MASK, mode).item() == pytest.approx(aggregate_loss(LOSS, MASK, mode).item())


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_all_empty_gives_zero_and_zero_gradient(mode):
    loss_mat = torch.tensor([[1.0, 2.0]], requires_grad=True)
    loss = aggregate_loss(loss_mat, torch.zeros(1, 2), mode)
    loss.backward()
    assert loss.item() == 0.0
    assert loss_mat.grad.tolist() == [[0.0, 0.0]]


def test_unknown_mode_lists_modes():
    with pytest.raises(ConfigError, match="token-mean, seq-mean-token-mean, seq-mean-token-sum"):
        aggregate_loss(LOSS, MASK, "seq-sum")


@pytest.mark.parametrize(("mode", "count"), [("token-mean", 3), ("seq-mean-token-mean", 2), ("seq-mean-token-sum", 2)])
def test_aggregation_count(mode, count):
    assert aggregation_count(MASK, mode).item() == count


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_weighted_by_count_equal_whole_batch(mode):
    whole = aggregate_loss(LOSS, MASK, mode)
    total = aggregation_count(MASK, mode)
    parts = [slice(0, 1), slice(1, 3)]
    combined = sum(aggregate_loss(LOSS[p], MASK[p], mode) * aggregation_count(MASK[p], mode) / total for p in parts)
    assert combined.item() == pytest.approx(whole.item())


def test_masked_mean_by_row():
    assert masked_mean(LOSS, MASK, dim=-1).tolist() == [1.5, 4.0, 0.0]


def test_masked_whiten():
    values = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([1, 1, 1, 0])
    # mean 2, unbiased variance ((1)^2 + 0 + (1)^2) / 2 = 1
    assert masked_whiten(values, mask)[:3].tolist() == pytest.approx([-1.0, 0.0, 1.0])


def test_masked_whiten_single_token_is_zero():
    assert masked_whiten(torch.tensor([5.0, 9.0]), torch.tensor([1, 0]))[0].item() == 0.0
