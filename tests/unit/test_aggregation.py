"""Loss aggregation modes, masked mean and whitening, checked against hand-computed numbers."""

import math

import pytest
import torch

from rfthpc.algorithms.aggregation import (
    aggregate_loss,
    aggregation_count,
    averages,
    loss_scale,
    masked_mean,
    masked_whiten,
)
from rfthpc.algorithms.registry import LOSS_AGG_MODES
from rfthpc.errors import ConfigError

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # third response is empty


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("seq-mean-token-mean", ((1 + 2) / 2 + 4 / 1) / 2),  # the empty response is not a sequence
        ("seq-mean-token-sum", ((1 + 2) + 4) / 2),
        ("token-sum", 1 + 2 + 4),
        ("seq-mean-token-sum-norm", ((1 + 2) + 4) / 2 / 3),  # L defaults to the padded width, 3
        ("token-sum-norm", (1 + 2 + 4) / 3),  # Trinity-RFT's seq-mean-token-sum-norm: no mean over responses
    ],
)
def test_modes(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_masked_inf_and_nan_do_not_leak(mode):
    poisoned = LOSS.clone()
    poisoned[0, 2] = math.inf
    poisoned[2, 0] = math.nan
    assert aggregate_loss(poisoned, MASK, mode).item() == pytest.approx(aggregate_loss(LOSS, MASK, mode).item())


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_all_empty_gives_zero_and_zero_gradient(mode):
    loss_mat = torch.tensor([[1.0, 2.0]], requires_grad=True)
    loss = aggregate_loss(loss_mat, torch.zeros(1, 2), mode)
    loss.backward()
    assert loss.item() == 0.0
    assert loss_mat.grad.tolist() == [[0.0, 0.0]]


def test_unknown_mode_lists_modes():
    with pytest.raises(ConfigError, match="token-mean, token-sum, seq-mean-token-mean, seq-mean-token-sum, "
                                          "seq-mean-token-sum-norm, token-sum-norm"):
        aggregate_loss(LOSS, MASK, "seq-sum")


@pytest.mark.parametrize(("mode", "count"), [("token-mean", 3), ("token-sum", 3), ("seq-mean-token-mean", 2),
                                             ("seq-mean-token-sum", 2), ("seq-mean-token-sum-norm", 2),
                                             ("token-sum-norm", 3)])
def test_aggregation_count(mode, count):
    assert aggregation_count(MASK, mode).item() == count


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_weighted_by_count_equal_whole_batch(mode):
    """As the trainer splits a batch: each micro-batch cut to its own longest response, its loss
    weighted by its share of the count (or 1 for token-sum); L fixed by loss_scale."""
    with loss_scale(7.0):
        whole = aggregate_loss(LOSS, MASK, mode)
        total = aggregation_count(MASK, mode)
        combined = 0.0
        for rows, width in (([0], 2), ([1, 2], 1)):
            loss_mb, mask_mb = LOSS[rows, :width], MASK[rows, :width]
            weight = aggregation_count(mask_mb, mode) / total if averages(mode) else 1.0
            combined = combined + aggregate_loss(loss_mb, mask_mb, mode) * weight
    assert combined.item() == pytest.approx(whole.item())


# Inputs and outputs of veRL 0.9.1's `verl.trainer.ppo.core_algos.agg_loss(loss_mat, loss_mask, mode)`
# (float64, one rank, no global batch info; gradient of the aggregate). Row 2 is empty, row 3 has a hole.
VERL_LOSS = [[1.0, 2.0, 3.0, 0.5], [4.0, 5.0, 6.0, -1.0], [7.0, 8.0, 9.0, 2.0], [0.25, -3.0, 1.5, 4.0]]
VERL_MASK = [[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]]
VERL_GRAD_PATTERN = [[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]]  # times the value below


@pytest.mark.parametrize(
    ("mode", "factor", "value", "grad"),
    [
        ("token-mean", None, 2.125, [[1 / 6] * 4] * 4),
        ("token-sum", None, 12.75, [[1.0] * 4] * 4),
        ("seq-mean-token-mean", None, 2.4722222043,
         [[0.1666666658] * 4, [0.33333333] * 4, [0.0] * 4, [0.1111111107] * 4]),
        ("seq-mean-token-sum", None, 4.25, [[1 / 3] * 4] * 4),
        ("seq-mean-token-sum-norm", None, 1.0625, [[0.0833333333] * 4] * 4),
        ("seq-mean-token-sum-norm", 10, 0.425, [[0.0333333333] * 4] * 4),
    ],
)
def test_modes_equal_verls_agg_loss(mode, factor, value, grad):
    loss_mat = torch.tensor(VERL_LOSS, dtype=torch.float64, requires_grad=True)
    loss = aggregate_loss(loss_mat, torch.tensor(VERL_MASK), mode, loss_scale_factor=factor)
    loss.backward()
    assert loss.item() == pytest.approx(value, rel=1e-5)
    expected = torch.tensor(grad, dtype=torch.float64) * torch.tensor(VERL_GRAD_PATTERN, dtype=torch.float64)
    torch.testing.assert_close(loss_mat.grad, expected, rtol=1e-5, atol=1e-9)


# Trinity-RFT 0.6.0's `aggregate_loss(loss_mat, loss_mask, "seq-mean-token-sum-norm")` on VERL_LOSS / VERL_MASK:
# sum(m l) / loss_mask.shape[-1] = 12.75 / 4, gradient 1/4 on every unmasked token.
def test_token_sum_norm_equals_trinitys_seq_mean_token_sum_norm():
    loss_mat = torch.tensor(VERL_LOSS, dtype=torch.float64, requires_grad=True)
    loss = aggregate_loss(loss_mat, torch.tensor(VERL_MASK), "token-sum-norm")
    loss.backward()
    assert loss.item() == pytest.approx(12.75 / 4)
    torch.testing.assert_close(loss_mat.grad, 0.25 * torch.tensor(VERL_GRAD_PATTERN, dtype=torch.float64))
    with loss_scale(10.0):
        assert aggregate_loss(loss_mat, torch.tensor(VERL_MASK), "token-sum-norm").item() == pytest.approx(1.275)


def test_norm_divides_by_the_constant_of_loss_scale_not_the_padded_width():
    one_token = torch.tensor([[3.0]])
    assert aggregate_loss(one_token, torch.ones(1, 1), "seq-mean-token-sum-norm").item() == 3.0  # width 1
    with loss_scale(4.0):
        assert aggregate_loss(one_token, torch.ones(1, 1), "seq-mean-token-sum-norm").item() == 0.75
        # An explicit factor wins over the block's; other modes ignore it.
        assert aggregate_loss(one_token, torch.ones(1, 1), "seq-mean-token-sum-norm", 2.0).item() == 1.5
        assert aggregate_loss(one_token, torch.ones(1, 1), "seq-mean-token-sum").item() == 3.0
    # The block's constant does not outlive it.
    assert aggregate_loss(one_token, torch.ones(1, 1), "seq-mean-token-sum-norm").item() == 3.0


def test_only_the_token_sums_do_not_average():
    assert [m for m in LOSS_AGG_MODES if not averages(m)] == ["token-sum", "token-sum-norm"]


def test_masked_mean_by_row():
    assert masked_mean(LOSS, MASK, dim=-1).tolist() == [1.5, 4.0, 0.0]


def test_masked_whiten():
    values = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([1, 1, 1, 0])
    # mean 2, unbiased variance ((1)^2 + 0 + (1)^2) / 2 = 1
    assert masked_whiten(values, mask)[:3].tolist() == pytest.approx([-1.0, 0.0, 1.0])


def test_masked_whiten_single_token_is_zero():
    assert masked_whiten(torch.tensor([5.0, 9.0]), torch.tensor([1, 0]))[0].item() == 0.0
