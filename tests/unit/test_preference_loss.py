"""DPO's loss (`algorithms.preference_loss.dpo`): its value, gradient and metrics against hand
computations, with and without label smoothing, and the same gradient when a pair's two responses
are in different micro-batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rfthpc.algorithms.policy_loss import PolicyLossInputs
from rfthpc.algorithms.preference_loss import dpo
from rfthpc.trainer.rl_batch import preference_pairs
from rfthpc.trainer.samples import Sample

# Two pairs (chosen, rejected, chosen, rejected), 3 tokens each; the last token of row 1 is padding.
LOG_PROB = [[-1.0, -2.0, -0.5], [-0.2, -0.3, -9.0], [-1.5, -0.5, -1.0], [-0.5, -1.0, -1.0]]
REF = [[-1.2, -1.8, -0.7], [-0.4, -0.1, -5.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
MASK = [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]]
SIGNS = [1, -1, 1, -1]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _ratios() -> list[float]:
    """r(y) = sum over the trained tokens of log pi - log pi_ref, per row, by hand."""
    return [sum(m * (lp - rf) for lp, rf, m in zip(*row)) for row in zip(LOG_PROB, REF, MASK)]


def _samples() -> list[Sample]:
    return [Sample(prompt_ids=np.array([1]), response_ids=np.array([2, 3, 4]), loss_mask=np.array(m, bool),
                   group=i // 2, preference=s) for i, (m, s) in enumerate(zip(MASK, SIGNS))]


def _inputs(rows: list[int]) -> tuple[torch.Tensor, PolicyLossInputs]:
    """Rows `rows` of the batch as a micro-batch, its partners' log-ratios taken from the whole batch at
    the start of the step (the current log-probabilities, as in a step of one update)."""
    log_prob = torch.tensor(LOG_PROB, dtype=torch.float64, requires_grad=True)
    ref, mask = torch.tensor(REF, dtype=torch.float64), torch.tensor(MASK, dtype=torch.bool)
    sign, partner = preference_pairs(_samples(), log_prob.detach(), ref, mask)
    return log_prob, PolicyLossInputs(log_prob=log_prob[rows], response_mask=mask[rows], ref_log_prob=ref[rows],
                                      pair_sign=sign[rows], partner_log_ratio=partner[rows].double())


def test_the_partners_log_ratio_is_the_other_reply_of_the_pair() -> None:
    r = _ratios()
    sign, partner = preference_pairs(_samples(), torch.tensor(LOG_PROB, dtype=torch.float64),
                                     torch.tensor(REF, dtype=torch.float64), torch.tensor(MASK))
    assert sign.tolist() == SIGNS
    assert partner.tolist() == pytest.approx([r[1], r[0], r[3], r[2]])


def test_a_pair_without_its_rejected_reply_is_refused() -> None:
    samples = _samples()
    samples[1].preference = 1
    with pytest.raises(ValueError, match=r"preference pair 0: needs one chosen and one rejected sample"):
        preference_pairs(samples, torch.tensor(LOG_PROB), torch.tensor(REF), torch.tensor(MASK))


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_the_loss_its_gradient_and_metrics_match_the_hand_computation(smoothing: float) -> None:
    beta = 0.5
    r = _ratios()
    z = [beta * (r[0] - r[1]), beta * (r[2] - r[3])]
    pair_loss = [-(1 - smoothing) * math.log(_sigmoid(x)) - smoothing * math.log(_sigmoid(-x)) for x in z]
    # dl/dz = -(1 - eps) sigmoid(-z) + eps sigmoid(z); the mean over 2 pairs divides by 2.
    dz = [(-(1 - smoothing) * _sigmoid(-x) + smoothing * _sigmoid(x)) / 2 for x in z]
    log_prob, inputs = _inputs([0, 1, 2, 3])
    loss, metrics = dpo(inputs, beta=beta, label_smoothing=smoothing)
    assert loss.item() == pytest.approx(sum(pair_loss) / 2)
    loss.backward()
    expected = [[beta * dz[i // 2] * (1 if SIGNS[i] > 0 else -1) * m for m in MASK[i]] for i in range(4)]
    assert log_prob.grad.tolist() == [pytest.approx(row) for row in expected]
    assert metrics["actor/dpo_loss"] == pytest.approx(sum(pair_loss) / 2)
    assert metrics["actor/chosen_reward"] == pytest.approx(beta * (r[0] + r[2]) / 2)
    assert metrics["actor/rejected_reward"] == pytest.approx(beta * (r[1] + r[3]) / 2)
    assert metrics["actor/reward_margin"] == pytest.approx((z[0] + z[1]) / 2)
    assert metrics["actor/accuracy_mean"] == pytest.approx(((r[0] > r[1]) + (r[2] > r[3])) / 2)
    assert metrics["actor/accuracy_mean"] == 0.5  # the hand values: pair 0 is ranked right, pair 1 wrong


def test_a_pair_split_over_micro_batches_gets_the_whole_batch_gradient() -> None:
    whole, inputs = _inputs([0, 1, 2, 3])
    dpo(inputs, beta=0.3)[0].backward()
    # Each micro-batch holds one reply of each pair and is weighted by its share of the responses,
    # as the trainer's update weights a seq-mean loss.
    split_grad = torch.zeros_like(whole)
    for rows in ([0, 3], [1, 2]):
        log_prob, part = _inputs(rows)
        (dpo(part, beta=0.3)[0] * 0.5).backward()
        split_grad += log_prob.grad
    assert torch.allclose(split_grad, whole.grad)


def test_each_pair_is_scored_on_its_own_not_pooled_as_trinity_does() -> None:
    # docs/configuration.md states it: the paper's (and TRL's) mean of per-pair losses; Trinity-RFT 0.6.0
    # pools the chosen rows' r and the rejected rows' r of the micro-batch into one logit.
    r, beta = _ratios(), 0.1
    log_prob, inputs = _inputs([0, 1, 2, 3])
    loss, _ = dpo(inputs, beta=beta)
    per_pair = (-math.log(_sigmoid(beta * (r[0] - r[1]))) - math.log(_sigmoid(beta * (r[2] - r[3])))) / 2
    pooled = -math.log(_sigmoid(beta * ((r[0] + r[2]) - (r[1] + r[3]))))
    assert loss.item() == pytest.approx(per_pair)
    assert abs(per_pair - pooled) > 1e-3
