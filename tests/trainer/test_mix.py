"""SFT+RL mixing (`algorithm_type: mix`, `mix_chord`): each step trains GRPO's loss on the rollouts and the SFT loss
on expert rows of a dataset, weighted 1 - mu and mu, each averaged over its own rows; CHORD's mu schedule and phi
weighting; the expert position checkpointed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.algorithms.mix_settings import ExpertMix, chord_mu, expert_rows, expert_split_problems
from rfthpc.algorithms.mixing import expert_loss
from rfthpc.config.buffer import ExperienceBufferConfig
from rfthpc.rundir.metrics import read_metrics
from rfthpc.store import ChunkWriter
from rfthpc.trainer.checkpoint_meta import read_checkpoint_meta
from tests.trainer.conftest import make_run, random_group, rl_config, run_trainer_inprocess


def test_chords_mu_warms_up_then_decays_on_a_cosine() -> None:
    # Trinity-RFT's schedule: linear to the peak over the warm-up, cosine down to the valley, the valley after.
    assert [chord_mu(s, 4, 4, 0.5, 0.1) for s in (0, 2, 4, 6, 8, 20)] == pytest.approx(
        [0.0, 0.25, 0.5, 0.1 + 0.4 * 0.5 * (1 + math.cos(math.pi / 2)), 0.1, 0.1])
    assert chord_mu(3, 0, 0, 0.2, 0.05) == 0.05  # neither phase: the valley (Trinity's chord-phi setting)


def test_the_expert_term_is_the_sft_loss_optionally_phi_weighted() -> None:
    log_prob = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.8, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    plain = ExpertMix(0, 0, 0.1, 0.1, phi=False, agg_mode="token-mean")
    loss, metrics = expert_loss(plain, log_prob, mask)
    nll = -log_prob
    assert loss.item() == pytest.approx((nll[0, :2].sum() + nll[1].sum()).item() / 5)
    assert metrics == {"expert/sft_loss": pytest.approx(loss.item())}
    phi = ExpertMix(0, 0, 0.1, 0.1, phi=True, agg_mode="seq-mean-token-mean")
    loss, metrics = expert_loss(phi, log_prob, mask)
    p = log_prob.exp()
    weighted = nll * p * (1 - p)
    rows = [weighted[0, :2].mean(), weighted[1].mean()]
    assert loss.item() == pytest.approx(sum(r.item() for r in rows) / 2)
    assert "expert/sft_phi_loss" in metrics


def test_a_batch_splits_into_expert_rows_and_whole_groups() -> None:
    assert expert_rows(320, 0.25) == 80 and expert_rows(16, 0.5) == 8
    assert expert_split_problems(320, 0.25, 8) == []
    [problem] = expert_split_problems(16, 0.25, 8)  # 4 expert rows, 12 rollouts: not whole groups of 8
    assert "12 rollouts, which are not whole groups of algorithm.repeat_times 8" in problem
    assert "must lie in [0, 1)" in expert_split_problems(16, 1.0, 4)[0]


def _expert_dataset(path: Path, n: int = 12) -> ExperienceBufferConfig:
    path.write_text("".join(json.dumps({"question": f"what is {i} + 1?", "answer": f"{i + 1}"}) + "\n"
                            for i in range(n)))
    data = ExperienceBufferConfig(path=str(path))
    data.format.prompt_key, data.format.response_key = "question", "answer"
    return data


def _run(tmp_path: Path, tiny_model: Path, name: str, **changes) -> list[dict]:
    cfg = rl_config(tiny_model, **{"buffer.total_steps": 2, "trainer.save_hf_checkpoint": "never",
                                   "trainer.save_interval": 1, **changes})
    run = make_run(tmp_path / name, cfg)
    rng = np.random.default_rng(0)
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=3600) as w:
        for i in range(4):
            g = random_group(rng, f"t{i}", 4, 384)
            g.experiences[0].reward, g.experiences[1].reward = 1.0, 0.0  # every group has contrast
            w.add(g)
    assert run_trainer_inprocess(run) == 0
    return [r for r in read_metrics(run.monitor / "trainer.jsonl")]


def test_a_mix_step_trains_both_terms_and_mu_zero_is_grpo(tmp_path: Path, tiny_model: Path) -> None:
    expert = _expert_dataset(tmp_path / "expert.jsonl")
    mix = {"algorithm.algorithm_type": "mix", "algorithm.repeat_times": 4, "buffer.train_batch_size": 16,
           "algorithm.sample_strategy_args": {"expert_data_ratio": 0.5},
           "buffer.trainer_input.auxiliary_buffers": {"sft_dataset": expert}, "algorithm.kl_loss_fn": "none"}
    mixed = _run(tmp_path, tiny_model, "mix", **mix)
    assert [r["mix/mu"] for r in mixed] == [0.1, 0.1] and [r["mix/expert_rows"] for r in mixed] == [8.0, 8.0]
    assert all(r["expert/sft_loss"] > 0 and "actor/pg_loss" in r for r in mixed)
    # The expert position is in the checkpoint: a resumed run takes the next rows.
    assert read_checkpoint_meta(tmp_path / "mix", 2).sft_data == {"consumed": 16}

    # With mu = 0 the expert rows weigh nothing: the step is GRPO's on the same rollouts, to float rounding.
    zero = _run(tmp_path, tiny_model, "mu0", **mix, **{"algorithm.policy_loss_fn_args": {"mu": 0.0}})
    grpo = _run(tmp_path, tiny_model, "grpo", **{"algorithm.algorithm_type": "grpo", "algorithm.repeat_times": 4,
                                                 "buffer.train_batch_size": 8, "algorithm.entropy_loss_fn": "default"})
    for a, b in zip(zero, grpo, strict=True):
        assert a["actor/grad_norm"] == pytest.approx(b["actor/grad_norm"], rel=1e-5)
        assert a["actor/pg_loss"] == pytest.approx(b["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert mixed[0]["actor/grad_norm"] != pytest.approx(grpo[0]["actor/grad_norm"], rel=1e-3)


def test_mix_chord_schedules_mu_and_weights_expert_tokens(tmp_path: Path, tiny_model: Path) -> None:
    expert = _expert_dataset(tmp_path / "expert.jsonl")
    records = _run(tmp_path, tiny_model, "chord", **{
        "algorithm.algorithm_type": "mix_chord", "algorithm.repeat_times": 4, "buffer.train_batch_size": 12,
        "algorithm.sample_strategy_args": {"expert_data_ratio": 0.3},
        "algorithm.policy_loss_fn_args": {"mu_warmup_steps": 2, "mu_decay_steps": 0, "mu_peak": 0.5,
                                          "mu_valley": 0.2},
        "buffer.trainer_input.auxiliary_buffers": {"sft_dataset": expert}, "algorithm.kl_loss_fn": "none"})
    assert [r["mix/mu"] for r in records] == [0.0, 0.25]
    assert [r["mix/expert_rows"] for r in records] == [4.0, 4.0]
    assert all("expert/sft_phi_loss" in r for r in records)
