"""Two ranks (torchrun, gloo, FSDP2) train the same model as one rank on the same data."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from safetensors.torch import load_file

from rfthpc.rundir.metrics import read_metrics
from rfthpc.weights import published as weights
from tests.trainer.conftest import make_run, rl_config, run_trainer_inprocess, start_trainer, write_groups

pytestmark = pytest.mark.slow


def test_two_ranks_match_one_rank(tmp_path: Path, tiny_model: Path) -> None:
    # Two updates per step (PPO ratio against recomputed log-probs), a KL loss against the
    # sharded reference model, token-budget micro-batches: every collective path of a step.
    cfg = rl_config(tiny_model, **{"buffer.total_steps": 3, "trainer.ppo_mini_batch_size": 1,
                                   "algorithm.kl_loss_fn": "k2", "algorithm.kl_loss_fn_args": {"kl_coef": 0.1},
                                   "trainer.max_token_len_per_gpu": 24, "trainer.save_hf_checkpoint": "never"})
    one, two = make_run(tmp_path / "one", cfg), make_run(tmp_path / "two", cfg)
    for run in (one, two):
        write_groups(run, 6)
    proc = start_trainer(two, nproc=2)
    assert run_trainer_inprocess(one) == 0
    assert proc.wait(timeout=300) == 0, (two.log / "trainer.log").read_text()[-3000:]

    a = load_file(str(weights.step_dir(one.root, 3) / "model.safetensors"))
    b = load_file(str(weights.step_dir(two.root, 3) / "model.safetensors"))
    base = load_file(str(tiny_model / "model.safetensors"))
    moved = max((a[k] - base[k]).abs().max().item() for k in a)
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    assert moved > 1e-3 and diff < 1e-5, (moved, diff)
    ra = {r["step"]: r for r in read_metrics(one.monitor / "trainer.jsonl")}
    rb = {r["step"]: r for r in read_metrics(two.monitor / "trainer.jsonl")}
    assert sorted(ra) == sorted(rb) == [1, 2, 3]
    for step in ra:
        for name in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl"):
            assert rb[step][name] == pytest.approx(ra[step][name], rel=1e-4, abs=1e-6), (step, name)


@pytest.mark.parametrize("mode", ["token-sum", "seq-mean-token-sum-norm"])
def test_two_ranks_match_one_rank_with_summed_and_normalised_losses(tmp_path: Path, tiny_model: Path,
                                                                    mode: str) -> None:
    """token-sum adds the ranks' sums; seq-mean-token-sum-norm divides by model.max_response_tokens,
    not by each micro-batch's own width: either way the split over ranks and micro-batches (token
    budget 24) does not change the update. A straight-through KL loss rides along."""
    cfg = rl_config(tiny_model, **{"buffer.total_steps": 2, "algorithm.loss_agg_mode": mode,
                                   "algorithm.kl_loss_fn": "k3+", "algorithm.kl_loss_fn_args": {"kl_coef": 0.1},
                                   "trainer.max_token_len_per_gpu": 24, "trainer.save_hf_checkpoint": "never"})
    one, two = make_run(tmp_path / "one", cfg), make_run(tmp_path / "two", cfg)
    for run in (one, two):
        write_groups(run, 4)
    proc = start_trainer(two, nproc=2)
    assert run_trainer_inprocess(one) == 0
    assert proc.wait(timeout=300) == 0, (two.log / "trainer.log").read_text()[-3000:]
    a = load_file(str(weights.step_dir(one.root, 2) / "model.safetensors"))
    b = load_file(str(weights.step_dir(two.root, 2) / "model.safetensors"))
    base = load_file(str(tiny_model / "model.safetensors"))
    moved = max((a[k] - base[k]).abs().max().item() for k in a)
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    assert moved > 1e-3 and diff < 1e-5, (moved, diff)
    rb = {r["step"]: r for r in read_metrics(two.monitor / "trainer.jsonl")}
    for r in read_metrics(one.monitor / "trainer.jsonl"):
        assert rb[r["step"]]["actor/grad_norm"] == pytest.approx(r["actor/grad_norm"], rel=1e-4)


def test_a_rank_without_samples_in_a_mini_batch_takes_part(tmp_path: Path, tiny_model: Path) -> None:
    """One-response groups, one group per update, two ranks: the second rank has only padding in every
    update and must still join each collective (it used to skip the metrics' reduction and hang)."""
    cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": "topr", "algorithm.repeat_times": 1,
                                   "buffer.total_steps": 2, "trainer.ppo_mini_batch_size": 1,
                                   "trainer.save_hf_checkpoint": "never"})
    one, two = make_run(tmp_path / "one", cfg), make_run(tmp_path / "two", cfg)
    for run in (one, two):
        write_groups(run, 4, repeat=1)
    proc = start_trainer(two, nproc=2)
    assert run_trainer_inprocess(one) == 0
    try:
        assert proc.wait(timeout=240) == 0, (two.log / "trainer.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its hung workers
            proc.wait()
    ra = {r["step"]: r for r in read_metrics(one.monitor / "trainer.jsonl")}
    rb = {r["step"]: r for r in read_metrics(two.monitor / "trainer.jsonl")}
    assert sorted(rb) == [1, 2]
    for step in ra:
        assert rb[step]["actor/pg_loss"] == pytest.approx(ra[step]["actor/pg_loss"], rel=1e-4, abs=1e-6)


def test_a_failure_on_rank_0_alone_reaches_every_rank(tmp_path: Path, tiny_model: Path) -> None:
    """Rank 0 alone reads the run directory; when that fails (here a damaged checkpoint record) the
    other ranks raise too instead of waiting for rank 0 in a collective (up to its 60-min timeout)."""
    cfg = rl_config(tiny_model, **{"buffer.total_steps": 2, "trainer.save_hf_checkpoint": "never"})
    run = make_run(tmp_path / "run", cfg)
    (run.checkpoint(1) / "actor").mkdir(parents=True)
    (run.checkpoint(1) / "actor" / "rfthpc_checkpoint.json").write_text('{"format": 99}')
    proc = start_trainer(run, nproc=2)
    try:
        assert proc.wait(timeout=240) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = (run.log / "trainer.log").read_text()
    assert "is not an rfthpc checkpoint of format 1" in log
    assert "rank 0 failed: ValueError" in log  # rank 1's own error, not a kill by torchrun
