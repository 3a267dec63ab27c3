"""GRPO with rollout correction, decoupled PPO and veRL's bypass mode train on the tiny model (in process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config.algorithm import RolloutCorrectionConfig
from rfthpc.rundir.metrics import read_metrics
from tests.trainer.conftest import make_run, rl_config, run_trainer_inprocess, write_groups


@pytest.mark.parametrize(("algorithm", "correction", "expected"), [
    # The random data's behaviour log-probabilities are far from the model's: the token_k1 rule
    # rejects some tokens, TIS truncates some weights.
    ({"algorithm.algorithm_type": "grpo"},
     RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold="2.0", rollout_rs="token_k1",
                             rollout_rs_threshold="0.2_5.0"),
     ("rollout_corr/rollout_is_mean", "rollout_corr/rollout_is_ratio_fraction_high",
      "rollout_corr/rollout_rs_masked_fraction", "rollout_corr/staleness_1/rollout_is_mean")),
    ({"algorithm.algorithm_type": "grpo", "algorithm.policy_loss_fn": "decoupled_ppo",
      "algorithm.policy_loss_fn_args": {"behav_imp_weight_cap": 5.0}},
     RolloutCorrectionConfig(),
     ("actor/behav_imp_weight_mean", "actor/behav_capped_fraction")),
    ({"algorithm.algorithm_type": "grpo"},
     RolloutCorrectionConfig(rollout_is="sequence", bypass_mode=True, loss_type="reinforce"),
     ("rollout_corr/rollout_is_mean",)),
])
def test_two_steps_with_rollout_correction(tmp_path: Path, tiny_model: Path, algorithm: dict,
                                           correction: RolloutCorrectionConfig, expected: tuple[str, ...]) -> None:
    cfg = rl_config(tiny_model, **{"buffer.total_steps": 2, "trainer.save_hf_checkpoint": "never", **algorithm})
    cfg.algorithm.rollout_correction = correction
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 4)  # policy version 0: staleness 0 at the first step, 1 at the second
    assert run_trainer_inprocess(run) == 0
    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}
    assert sorted(records) == [1, 2]
    for name in ("rollout_corr/kl", "rollout_corr/k3_kl", "actor/pg_loss", "actor/grad_norm"):
        assert name in records[2], name
    assert "rollout_corr/staleness_0/kl" in records[1] and "rollout_corr/staleness_1/k3_kl" in records[2]
    assert records[2]["rollout_corr/k3_kl"] > 0 and records[2]["actor/grad_norm"] > 0
    for name in expected:
        assert name in records[2], name
    if correction.rollout_rs:
        assert 0 < records[2]["rollout_corr/rollout_rs_masked_fraction"] < 1
