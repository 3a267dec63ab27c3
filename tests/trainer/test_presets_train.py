"""Every algorithm preset trains: two trainer steps on the tiny model, finite metrics, weights moved."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from rfthpc.algorithms import ADVANTAGE_FNS, POLICY_LOSS_FNS
from rfthpc.algorithms.presets import ALGORITHM_PRESETS, DATASET_ALGORITHMS, needs_greedy_baseline
from rfthpc.config.buffer import ExperienceBufferConfig
from rfthpc.rundir.metrics import read_metrics
from rfthpc.store import ChunkWriter
from rfthpc.store.schema import BASELINE_REWARD
from rfthpc.weights import published as weights
from tests.trainer.conftest import make_run, random_group, rl_config, run_trainer_inprocess

RL_PRESETS = sorted(set(ALGORITHM_PRESETS) - set(DATASET_ALGORITHMS))


@pytest.mark.parametrize("algorithm_type", RL_PRESETS)
def test_each_preset_runs_two_trainer_steps(tmp_path: Path, tiny_model: Path, algorithm_type: str) -> None:
    # The preset's functions and arguments as a user gets them; two mini-batches per step, so
    # losses that compare with the recomputed policy of the step's start see a ratio other than 1.
    # A teacher where the preset distils one (on_policy_distill): the model itself, scoring random samples.
    teacher = ADVANTAGE_FNS.needs(ALGORITHM_PRESETS[algorithm_type]["advantage_fn"]).teacher
    # Expert rows where the preset mixes them in (mix, mix_chord): as many as the rollouts, from a small dataset.
    mixes = POLICY_LOSS_FNS.needs(ALGORITHM_PRESETS[algorithm_type]["policy_loss_fn"]).expert_data
    expert = {}
    if mixes:
        data = ExperienceBufferConfig(path=str(tmp_path / "expert.jsonl"))
        data.format.prompt_key, data.format.response_key = "question", "answer"
        (tmp_path / "expert.jsonl").write_text('{"question": "1 + 2?", "answer": "3"}\n{"question": "2 + 2?", '
                                               '"answer": "4"}\n')
        expert = {"buffer.trainer_input.auxiliary_buffers": {"sft_dataset": data}, "buffer.train_batch_size": 16}
    cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": algorithm_type, "algorithm.kl_loss_fn": None,
                                   "algorithm.repeat_times": 4, "buffer.total_steps": 2,
                                   "trainer.ppo_mini_batch_size": 1, "trainer.save_hf_checkpoint": "never",
                                   "model.teacher_model_path": str(tiny_model) if teacher else None, **expert})
    run = make_run(tmp_path / "run", cfg)
    rng = np.random.default_rng(0)
    groups = [random_group(rng, f"t{i}", 4, 384) for i in range(4)]
    for g in groups:
        # Groups as the preset's explorers commit them: with contrast (dynamic sampling keeps no other),
        # and with the greedy response's reward where the advantage needs it (remax).
        g.experiences[0].reward, g.experiences[1].reward = 1.0, 0.0
        if needs_greedy_baseline(ALGORITHM_PRESETS[algorithm_type]["advantage_fn"]):
            g.info[BASELINE_REWARD] = 0.5
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=3600) as w:
        for g in groups:
            w.add(g)
    assert run_trainer_inprocess(run) == 0
    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}
    assert sorted(records) == [1, 2]
    # RAFT trains the SFT loss (on each group's best responses), the others a policy-gradient loss.
    loss = "actor/sft_loss" if ALGORITHM_PRESETS[algorithm_type]["policy_loss_fn"] == "sft" else "actor/pg_loss"
    for step in (1, 2):
        assert loss in records[step] and "actor/grad_norm" in records[step]
        assert not mixes or records[step]["mix/expert_rows"] == 8.0
        assert all(math.isfinite(v) for v in records[step].values() if isinstance(v, float))
    assert records[2]["actor/grad_norm"] > 0
    before = load_file(str(weights.step_dir(run.root, 0) / "model.safetensors"))
    after = load_file(str(weights.step_dir(run.root, 2) / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)
