"""Every loss aggregation mode gives one optimizer update the same gradient however the mini-batch
is cut into micro-batches, and that gradient is the whole mini-batch's loss gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rfthpc.algorithms import LOSS_AGG_MODES, aggregate_loss
from rfthpc.config.algorithm import AlgorithmConfig
from rfthpc.config.derive import finalize
from rfthpc.config.model import ModelConfig
from rfthpc.config.schema import Config
from rfthpc.config.settings import AlgorithmSettings
from rfthpc.errors import ConfigError
from rfthpc.trainer.batching import MicroBatch, plan_micro_batches
from rfthpc.trainer.losses import Algorithm
from rfthpc.trainer.samples import Sample
from rfthpc.trainer.update import ShardedUpdater

MAX_RESPONSE = 9
"""model.max_response_tokens: seq-mean-token-sum-norm's constant L."""


class TokenScores(nn.Module):
    """A stand-in policy: log pi(token) = -softplus(w[token]), one parameter per vocabulary entry."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1.0, 1.0, 16, dtype=torch.float64))

    def forward(self, mb: MicroBatch) -> torch.Tensor:
        return -nn.functional.softplus(self.w[mb.response_ids])


def _samples() -> list[Sample]:
    """Responses of 1 to 6 tokens, one with a hole in its mask (an observation) and one fully masked."""
    rng = np.random.default_rng(3)
    masks = [[1], [1, 1, 1, 1, 1, 1], [1, 0, 0, 1, 1], [0, 0, 0], [1, 1], [1, 1, 1, 1]]
    return [Sample(np.array([1, 2]), rng.integers(0, 16, len(m)), np.array(m, bool), reward=float(i % 2),
                   group=i // 2)
            for i, m in enumerate(masks)]


ADVANTAGES = [1.0, -0.5, 2.0, 0.7, -1.5, 0.25]


def _algorithm(mode: str) -> Algorithm:
    cfg = Config(algorithm=AlgorithmConfig(algorithm_type="grpo", loss_agg_mode=mode, kl_loss_fn="none"),
                 model=ModelConfig(max_response_tokens=MAX_RESPONSE))
    return Algorithm.from_settings(AlgorithmSettings.of(finalize(cfg).algorithm))


def _micro_loss(alg: Algorithm, model: TokenScores):
    def loss(_model: nn.Module, mb: MicroBatch, idx: list[int]):
        lp = model(mb)
        adv = torch.tensor([ADVANTAGES[i] for i in idx]).unsqueeze(1).expand_as(lp)
        # old = lp - 0.1 puts the ratio at e^0.1, so PPO's clip is active on positive advantages.
        return alg.actor_loss(lp, torch.zeros_like(lp), mb.response_mask, lp.detach() - 0.1, adv, None, None)
    return loss


def _update(mode: str, micro_batch_size: int, env) -> tuple[torch.Tensor, dict[str, float]]:
    """The parameter change of one SGD(lr=1) update: minus the gradient."""
    alg = _algorithm(mode)
    model = TokenScores()
    before = model.w.detach().clone()
    samples = _samples()
    indices = list(range(len(samples)))
    updater = ShardedUpdater(
        model, torch.optim.SGD(model.parameters(), lr=1.0), env,
        lambda s, i: plan_micro_batches(s, i, 1, token_budget=None, micro_batch_size=micro_batch_size),
        alg.weight, 0.0, lambda m, mb: m(mb), alg.averaged,
    )
    width = max(len(s.response_ids) for s in samples)
    mask = torch.tensor(np.stack([np.pad(s.loss_mask, (0, width - len(s.loss_mask))) for s in samples]))
    result = updater.update(samples, indices, mask, _micro_loss(alg, model))
    assert result.finite
    return before - model.w.detach(), result.metrics


@pytest.fixture(scope="module")
def env():
    from rfthpc.trainer.dist import init_distributed

    env = init_distributed()
    yield env
    env.close()


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_one_micro_batch_equals_many(mode: str, env) -> None:
    whole, metrics = _update(mode, 6, env)
    # The whole mini-batch's loss gradient, computed directly on the batch padded to its widest row.
    alg, model, samples = _algorithm(mode), TokenScores(), _samples()
    from rfthpc.trainer.batching import collate

    mb = collate(samples, list(range(6)), torch.device("cpu"))
    loss, _ = _micro_loss(alg, model)(model, mb, mb.indices)
    loss.backward()
    torch.testing.assert_close(whole, model.w.grad, rtol=1e-6, atol=1e-8)
    assert whole.abs().max().item() > 1e-3
    for size in (1, 2, 4):
        split, split_metrics = _update(mode, size, env)
        torch.testing.assert_close(split, whole, rtol=1e-6, atol=1e-8)
        if alg.averaged:
            # token-sum's loss metric is a count-weighted mean of micro-batch sums (see update.py).
            assert split_metrics["actor/pg_loss"] == pytest.approx(metrics["actor/pg_loss"], rel=1e-6)
        assert split_metrics["actor/pg_clipfrac"] == pytest.approx(metrics["actor/pg_clipfrac"], rel=1e-6)


def test_norm_divides_by_max_response_tokens_not_the_padded_width() -> None:
    """Dr. GRPO's L is model.max_response_tokens (9 here), though the batch is 6 tokens wide."""
    alg = _algorithm("seq-mean-token-sum-norm")
    assert alg.loss_scale_factor == MAX_RESPONSE
    lp = torch.tensor([[-1.0, -2.0], [-3.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.ones(2, 2)
    loss, metrics = alg.actor_loss(lp, torch.zeros(2, 2), mask, lp.detach(), adv, None, None)
    # ratio 1: the PPO loss is -A per token; seq sums -2 and -1, over 2 sequences and L = 9
    assert loss.item() == pytest.approx(-3.0 / (2 * MAX_RESPONSE))
    assert metrics["actor/pg_loss"] == pytest.approx(loss.item())
    assert aggregate_loss(lp, mask, "seq-mean-token-sum-norm").item() == pytest.approx(-6.0 / (2 * 2))


def test_an_explicit_loss_scale_factor_wins_and_norm_without_one_is_refused() -> None:
    cfg = Config(algorithm=AlgorithmConfig(algorithm_type="grpo", loss_agg_mode="seq-mean-token-sum-norm",
                                           loss_scale_factor=4096), model=ModelConfig(max_response_tokens=9))
    assert Algorithm.from_settings(AlgorithmSettings.of(finalize(cfg).algorithm)).loss_scale_factor == 4096
    bare = finalize(Config(algorithm=AlgorithmConfig(algorithm_type="grpo", loss_agg_mode="seq-mean-token-sum-norm")))
    with pytest.raises(ConfigError, match="algorithm.loss_scale_factor: .*model.max_response_tokens"):
        Algorithm.from_settings(AlgorithmSettings.of(bare.algorithm))
