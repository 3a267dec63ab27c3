"""rfthpc's policy losses against veRL 0.9.1's on the same inputs (loss, gradient, metrics; rtol 1e-5).

The expected values were produced by veRL itself (tools/verl_policy_loss_reference.py) and are
stored as literals in verl_policy_loss_cases.py; rfthpc does not import veRL.
"""

import pytest
import torch

from rfthpc.algorithms import POLICY_LOSS_FNS
from rfthpc.algorithms.policy_loss import PolicyLossInputs
from tests.unit.verl_policy_loss_cases import BATCHES, CASES


def _inputs(batch):
    return PolicyLossInputs(
        log_prob=torch.tensor(batch["log_prob"], dtype=torch.float64, requires_grad=True),
        response_mask=torch.tensor(batch["response_mask"]),
        old_log_prob=torch.tensor(batch["old_log_prob"], dtype=torch.float64),
        advantages=torch.tensor(batch["advantages"], dtype=torch.float64),
    )


def _veRL_row_scale(case, mask):
    """veRL's geo_mean averages over every row, fully padded ones too (as 0); rfthpc over the non-empty
    responses (documented in geo_mean): its numbers are veRL's times rows / non-empty rows."""
    if case["name"] != "geo_mean":
        return 1.0
    rows = mask.shape[0]
    return rows / int((mask.sum(-1) > 0).sum())


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['verl']}-{c['batch']}-{c['mode']}")
def test_policy_loss_matches_verl(case):
    inputs = _inputs(BATCHES[case["batch"]])
    loss, metrics = POLICY_LOSS_FNS.get(case["name"])(inputs, loss_agg_mode=case["mode"], **case["args"])
    loss.backward()
    scale = _veRL_row_scale(case, inputs.response_mask)
    expected = case["expected"]
    torch.testing.assert_close(loss.item(), expected["loss"] * scale, rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(
        inputs.log_prob.grad, torch.tensor(expected["grad"], dtype=torch.float64) * scale, rtol=1e-5, atol=1e-12
    )
    for key, value in expected["metrics"].items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-12), key


def test_cases_cover_every_verl_loss_and_mode():
    covered = {(c["verl"], c["mode"]) for c in CASES}
    for verl_name in ("vanilla", "cispo", "gpg", "gspo", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "dro"):
        for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
            assert (verl_name, mode) in covered
    # veRL's sapo and geo_mean ignore loss_agg_mode; rfthpc equals them under seq-mean-token-mean
    assert {("sapo", "seq-mean-token-mean"), ("geo_mean", "seq-mean-token-mean")} <= covered
