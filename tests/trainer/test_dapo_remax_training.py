"""The remax preset trains on the greedy baselines its explorers store (world size 1, in process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rfthpc.rundir.metrics import read_metrics
from rfthpc.store import ChunkWriter
from rfthpc.store.schema import BASELINE_REWARD
from tests.trainer.conftest import make_run, random_group, rl_config, run_trainer_inprocess


def _train(tmp_path: Path, tiny_model: Path, algorithm_type: str, baseline: bool) -> list[dict]:
    cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": algorithm_type, "algorithm.repeat_times": 4,
                                   "algorithm.kl_loss_fn": None, "buffer.total_steps": 2})
    run = make_run(tmp_path / "run", cfg)
    rng = np.random.default_rng(0)
    groups = [random_group(rng, f"t{i}", 4, 384) for i in range(4)]
    for g in groups:
        # Dynamic sampling commits only groups with contrast.
        g.experiences[0].reward, g.experiences[1].reward = 1.0, 0.0
        if baseline:
            g.info[BASELINE_REWARD] = 0.5
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=3600) as w:
        for g in groups:
            w.add(g)
    assert run_trainer_inprocess(run) == 0
    return read_metrics(run.monitor / "trainer.jsonl")


def test_remax_trains_on_the_stored_greedy_baseline(tmp_path: Path, tiny_model: Path) -> None:
    records = _train(tmp_path, tiny_model, "remax", baseline=True)
    assert [r["step"] for r in records] == [1, 2]
    assert all(np.isfinite(r["actor/pg_loss"]) for r in records)
    # Rewards 0/1 and a baseline of 0.5: before the k1 KL penalty (coefficient 0.001) every advantage is
    # +-0.5; the penalty moves it by a few thousandths per token.
    for r in records:
        assert r["critic/advantages/max"] == pytest.approx(0.5, abs=0.05)
        assert r["critic/advantages/min"] == pytest.approx(-0.5, abs=0.05)


def test_remax_without_baselines_says_so(tmp_path: Path, tiny_model: Path) -> None:
    from rfthpc.errors import ConfigError

    with pytest.raises(ConfigError, match="'remax' needs the reward of a greedy response"):
        _train(tmp_path, tiny_model, "remax", baseline=False)
