"""The trainer end to end in this process (world size 1): real tiny model, real store, real files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.cli import main
from rfthpc.config import Config
from rfthpc.config.buffer import TasksetConfig
from rfthpc.config.schema import StageConfig
from rfthpc.demos.synth_gsm8k import generate_splits, write_jsonl
from rfthpc.rundir.metrics import read_metrics
from rfthpc.rundir.paths import RunDir
from rfthpc.store import ChunkWriter
from rfthpc.store.layout import list_chunks
from rfthpc.tasks.claims import TaskClaims
from rfthpc.trainer.checkpoint import latest_checkpoint
from rfthpc.trainer.checkpoint_meta import read_checkpoint_meta
from rfthpc.weights import published as weights
from tests.records import trainer_report
from tests.trainer.conftest import make_run, random_group, rl_config, run_trainer_inprocess, sft_stage, write_groups


def _records(run) -> dict[int, dict]:
    """The last metrics record of each step (a resumed run logs re-trained steps again)."""
    return {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}


def test_rl_run_publishes_checkpoints_and_logs(tmp_path: Path, tiny_model: Path) -> None:
    cfg = rl_config(tiny_model, **{"trainer.save_interval": 2, "synchronizer.keep_published": 2})
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 8)
    assert run_trainer_inprocess(run) == 0

    meta = trainer_report(run)
    assert meta["done"] and meta["step"] == 4 and meta["stage"] == "rft" and meta["published_version"] == 4
    # Published every step (sync_interval 1) from step 0; the two newest kept.
    assert weights.published_steps(run.root) == [3, 4] and weights.read_latest(run.root) == 4
    assert latest_checkpoint(run.root) == 4 and (run.root / "global_step_2").is_dir()
    actor = run.checkpoint(4) / "actor"
    assert {"model", "optim", "hf_config", "extra_state_world_size_1_rank_0.pt", "rfthpc_checkpoint.json",
            "huggingface"} <= set(os.listdir(actor))
    assert (actor / "hf_config" / "config.json").is_file() and (actor / "hf_config" / "tokenizer.json").is_file()
    torch.load(actor / "extra_state_world_size_1_rank_0.pt", weights_only=True)
    ckpt = read_checkpoint_meta(run.root, 4)
    assert ckpt.stage_finished and ckpt.reader.counters["consumed"] == 8
    # The merged HF copy of the last checkpoint is the published policy of that step.
    merged = weights.step_dir(run.root, 4) / "model.safetensors"
    from safetensors.torch import load_file

    a, b = load_file(str(merged)), load_file(str(actor / "huggingface" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    records = _records(run)
    assert sorted(records) == [1, 2, 3, 4]
    for name in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm",
                 "actor/lr", "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean",
                 "response_length/mean", "perf/throughput", "perf/time_per_step", "store/consumed",
                 "staleness/mean", "staleness/max", "timing/wait_experience_s", "timing/compute_s",
                 "timing/publish_s", "timing/checkpoint_s"):
        assert name in records[4], name
    assert records[4]["store/consumed"] == 8.0 and records[4]["staleness/max"] == 3.0
    # Every step published (sync_interval 1); steps 2 and 4 also wrote a checkpoint, 1 and 3 did not.
    assert all(r["timing/publish_s"] > 0 for r in records.values())
    assert [records[k]["timing/checkpoint_s"] > 0 for k in (1, 2, 3, 4)] == [False, True, False, True]
    assert records[4]["timing/compute_s"] == records[4]["perf/time_per_step"]


@pytest.mark.parametrize("keep", [False, True])
def test_checkpoints_delete_consumed_chunks_unless_asked_to_keep_them(tmp_path: Path, tiny_model: Path,
                                                                      keep: bool) -> None:
    cfg = rl_config(tiny_model, **{"trainer.save_interval": 1, "filesystem.keep_consumed_chunks": keep})
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 8, per_chunk=2)
    assert run_trainer_inprocess(run) == 0
    left = [r for r in list_chunks(run.root / "experiences") if not r.quarantined]
    assert len(left) == (4 if keep else 0)


def test_ppo_trains_a_critic_against_a_reference(tmp_path: Path, tiny_model: Path) -> None:
    cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": "ppo", "algorithm.kl_loss_fn": None,
                                   "algorithm.repeat_times": 2, "buffer.total_steps": 2,
                                   "trainer.ppo_mini_batch_size": 1, "trainer.save_hf_checkpoint": "never"})
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 4, repeat=2)
    assert run_trainer_inprocess(run) == 0
    records = _records(run)
    for name in ("critic/vf_loss", "critic/grad_norm", "critic/values/mean", "actor/kl_loss", "actor/pg_loss"):
        assert name in records[2], name
    assert {"model", "optim", "hf_config", "rfthpc_checkpoint.json"} <= set(os.listdir(run.checkpoint(2) / "critic"))


def test_padding_free_micro_batches_train_the_padded_runs_model(tmp_path: Path, tiny_model: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """PPO (critic, reference, KL loss, two updates a step) with padding-free micro-batches trains the
    weights the padded run trains, with the same losses: the packing changes no number, only what
    is computed (and the token budget's bins)."""
    from safetensors.torch import load_file

    from rfthpc.trainer import batching

    layouts: set[bool] = set()
    collate = batching.collate

    def spy(*args, packed: bool = False, **kwargs):
        layouts.add(packed)
        return collate(*args, packed=packed, **kwargs)

    monkeypatch.setattr(batching, "collate", spy)
    runs = {}
    for padding_free in (False, True):
        cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": "ppo", "algorithm.repeat_times": 2,
                                       "algorithm.kl_loss_fn": "k2", "algorithm.kl_loss_fn_args": {"kl_coef": 0.1},
                                       "buffer.total_steps": 2, "trainer.ppo_mini_batch_size": 1,
                                       "trainer.share_prompt_forward": False, "trainer.max_token_len_per_gpu": 24,
                                       "trainer.use_remove_padding": padding_free,
                                       "trainer.save_hf_checkpoint": "never"})
        runs[padding_free] = run = make_run(tmp_path / f"run{padding_free}", cfg)
        write_groups(run, 4, repeat=2)
        layouts.clear()
        assert run_trainer_inprocess(run) == 0
        assert layouts == {padding_free}
    a = load_file(str(weights.step_dir(runs[False].root, 2) / "model.safetensors"))
    b = load_file(str(weights.step_dir(runs[True].root, 2) / "model.safetensors"))
    base = load_file(str(tiny_model / "model.safetensors"))
    assert max((a[k] - base[k]).abs().max().item() for k in a) > 1e-3
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    padded, packed = _records(runs[False]), _records(runs[True])
    for step in (1, 2):
        for name in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/vf_loss", "critic/values/mean"):
            assert packed[step][name] == pytest.approx(padded[step][name], rel=1e-4, abs=1e-6), (step, name)


def test_critic_warmup_leaves_the_actors_lr_warmup_whole(tmp_path: Path, tiny_model: Path) -> None:
    """Steps where only the critic trains do not advance the actor's schedule (as in veRL)."""
    cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": "ppo", "algorithm.kl_loss_fn": None,
                                   "algorithm.repeat_times": 2, "buffer.total_steps": 3,
                                   "trainer.critic_warmup": 1, "algorithm.optimizer.lr_warmup_steps": 2,
                                   "trainer.save_hf_checkpoint": "never"})
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 6, repeat=2)
    assert run_trainer_inprocess(run) == 0
    records = _records(run)
    assert "actor/lr" not in records[1] and "critic/vf_loss" in records[1]
    assert [records[s]["actor/lr"] for s in (2, 3)] == pytest.approx([0.5e-3, 1e-3])


def _run_with_nan_group(tmp_path: Path, cfg: Config, n_groups: int, bad: int) -> RunDir:
    """Train on `n_groups` random groups where group `bad` has NaN behaviour logprobs (an engine's fault)."""
    run = make_run(tmp_path / "run", cfg)
    rng = np.random.default_rng(0)
    groups = [random_group(rng, f"t{i}", 4, 384) for i in range(n_groups)]
    for e in groups[bad].experiences:
        e.logprobs = np.full(len(e.response_ids), np.nan, np.float32)
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=2) as w:
        for g in groups:
            w.add(g)
    assert run_trainer_inprocess(run) == 0
    return run


def test_nan_loss_abandons_the_batch_and_publishes_nothing(tmp_path: Path, tiny_model: Path) -> None:
    cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": "tis", "buffer.total_steps": 2,
                                   "synchronizer.keep_published": 10})
    run = _run_with_nan_group(tmp_path, cfg, n_groups=6, bad=2)  # the second batch
    records = read_metrics(run.monitor / "trainer.jsonl")
    nan_records = [r for r in records if "actor/lr" not in r]
    assert len(nan_records) == 1 and nan_records[0]["trainer/nan_skipped_batches"] == 1.0
    assert nan_records[0]["trainer/nan_updates_kept"] == 0  # one update per step: none was applied
    assert nan_records[0]["step"] == 2 and nan_records[0]["actor/pg_loss"] == "nan"  # it would have been step 2
    trained = [r for r in records if "actor/lr" in r]
    assert [r["step"] for r in trained] == [1, 2] and all(np.isfinite(r["actor/pg_loss"]) for r in trained)
    # Three batches read, two steps trained, and only steps 0, 1, 2 ever published.
    assert read_checkpoint_meta(run.root, 2).reader.counters["consumed"] == 6
    assert weights.published_steps(run.root) == [0, 1, 2]
    state = weights.step_dir(run.root, 2) / "model.safetensors"
    from safetensors.torch import load_file

    assert all(torch.isfinite(t).all() for t in load_file(str(state)).values())


def test_nan_in_a_later_mini_batch_says_the_earlier_updates_stay(tmp_path: Path, tiny_model: Path) -> None:
    """One update per group: the first group's update is applied before the second's NaN abandons the batch."""
    cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": "tis", "buffer.total_steps": 1,
                                   "trainer.ppo_mini_batch_size": 1})
    run = _run_with_nan_group(tmp_path, cfg, n_groups=4, bad=1)
    records = read_metrics(run.monitor / "trainer.jsonl")
    (nan_record,) = [r for r in records if "actor/lr" not in r]
    assert nan_record["trainer/nan_updates_kept"] == 1 and nan_record["step"] == 1
    assert [r["step"] for r in records if "actor/lr" in r] == [1]


def _out_of_vocabulary(e) -> str:
    e.response_ids[0] = 5000  # an explorer running another tokenizer
    return "token id 5000 is outside the model's vocabulary [0, 384)"


def _too_long(e) -> str:
    n = 70  # more than trainer.max_token_len_per_gpu (64)
    e.response_ids, e.logprobs, e.loss_mask = np.full(n, 7), np.zeros(n, np.float32), np.ones(n, np.int8)
    return f"prompt + response is {len(e.prompt_ids) + n} tokens, more than the trainer's limit of 64"


@pytest.mark.parametrize("spoil", [_out_of_vocabulary, _too_long])
def test_a_bad_group_stops_the_trainer_naming_explorer_and_chunk(tmp_path: Path, tiny_model: Path, spoil,
                                                                  capsys: pytest.CaptureFixture) -> None:
    run = make_run(tmp_path / "run", rl_config(tiny_model))
    rng = np.random.default_rng(1)
    good, bad = random_group(rng, "t0", 4, 384, explorer="ex_b"), random_group(rng, "t1", 4, 384, explorer="ex_b")
    message = spoil(bad.experiences[1])
    with ChunkWriter(run.root, "ex_b", 3, groups_per_chunk=1) as w:
        good.rank = bad.rank = 3
        w.add(good)
        w.add(bad)
    assert main(["train", "--run-dir", str(run.root)]) == 2
    err = capsys.readouterr().err
    (chunk,) = (run.experiences / "ex_b").glob("c00003-*-00000001-*.h5")
    assert message in err
    assert "explorer 'ex_b' rank 3" in err and str(chunk) in err and "experience 1" in err and "'t1'" in err


def test_sft_then_rft_counts_steps_globally(tmp_path: Path, tiny_model: Path) -> None:
    data = write_jsonl(tmp_path / "sft.jsonl", generate_splits(10, 0)["train"])
    cfg = rl_config(tiny_model, **{"buffer.total_steps": 2})
    cfg.stages = [sft_stage(data, 3), StageConfig(stage_name="rft")]
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 4)
    assert run_trainer_inprocess(run) == 0
    records = _records(run)
    assert sorted(records) == [1, 2, 3, 4, 5]
    assert all("actor/sft_loss" in records[s] for s in (1, 2, 3))
    assert records[3]["actor/sft_loss"] < records[1]["actor/sft_loss"]
    assert all("actor/pg_loss" in records[s] for s in (4, 5))
    # The RL stage began by publishing the SFT result as version 3.
    assert weights.published_steps(run.root)[0] == 3
    sft_end = read_checkpoint_meta(run.root, 3)
    assert sft_end.stage == "sft_warmup" and sft_end.stage_finished and sft_end.sft_data == {"consumed": 12}
    meta = trainer_report(run)
    assert meta["done"] and meta["stage"] == "rft" and meta["stage_start_step"] == 3 and meta["step"] == 5


def test_the_stage_ends_when_the_explorers_tasks_are_done(tmp_path: Path, tiny_model: Path) -> None:
    cfg = rl_config(tiny_model, **{"buffer.total_steps": None})
    cfg.buffer.explorer_input.tasksets = [TasksetConfig(name="math", path="unused")]
    run = make_run(tmp_path / "run", cfg)
    claims = TaskClaims(run.root, "math", num_tasks=5)
    claims.complete(claims.claim(5))
    assert claims.finished
    write_groups(run, 5)  # two full batches of 2 groups and one group left over
    assert run_trainer_inprocess(run) == 0
    assert sorted(_records(run)) == [1, 2]
    assert trainer_report(run)["done"]
    assert read_checkpoint_meta(run.root, 2).reader.counters["consumed"] == 4


def test_the_stage_ends_cleanly_when_stale_groups_cannot_be_replaced(tmp_path: Path, tiny_model: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Lock-step (max_staleness 0): a group one version behind is dropped, and with the taskset's
    only epoch used up no fresh task can replace it, so the stage ends early, saying why."""
    cfg = rl_config(tiny_model, **{"buffer.total_steps": 3, "synchronizer.sync_offset": 0})
    cfg.buffer.explorer_input.tasksets = [TasksetConfig(name="math", path="unused", total_epochs=1)]
    run = make_run(tmp_path / "run", cfg)
    claims = TaskClaims(run.root, "math", num_tasks=6, max_tasks=6)
    got = claims.claim(6)
    rng = np.random.default_rng(2)
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=1) as w:
        for c, version in zip(got, [0, 0, 0, 1, 1, 2], strict=True):
            g = random_group(rng, f"math/{c.index}", 4, 384, version=version)
            g.info = {"claims": c.taskset, "epoch": c.epoch, "index": c.index}
            w.add(g)
    claims.complete(got)
    with caplog.at_level("WARNING", logger="rfthpc.trainer.loop"):
        assert run_trainer_inprocess(run) == 0
    assert "stage 'rft' ends at step 2 of 3: the data ran out: taskset 'math' was explored for all its 1 " \
           "epoch(s); 1 group(s) left, fewer than a batch of 2" in caplog.text
    meta = trainer_report(run)
    assert meta["done"] and meta["step"] == 2
    reader = read_checkpoint_meta(run.root, 2).reader
    assert reader.counters["dropped_stale"] == 1 and reader.lost == {"math": 1}
    status = TaskClaims.read_status(run.root, "math")
    assert status is not None and status.exhausted and status.refill == 1


def test_replay_trains_on_groups_again_and_reports_the_reuse(tmp_path: Path, tiny_model: Path) -> None:
    from rfthpc.config.buffer import ReplayBufferConfig

    cfg = rl_config(tiny_model, **{"trainer.save_interval": 2, "trainer.save_hf_checkpoint": "never"})
    cfg.buffer.trainer_input.experience_buffer.replay_buffer = ReplayBufferConfig(
        enable=True, reuse_cooldown_time=0.0, priority_fn="decay_limit_randomization",
        priority_fn_args={"decay": 1.0, "use_count_limit": 2})
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 4)  # 4 steps of 2 groups from 4 groups: each is trained twice
    assert run_trainer_inprocess(run) == 0
    records = _records(run)
    assert [(records[s]["store/consumed"], records[s]["store/reused"]) for s in (1, 2, 3, 4)] == \
        [(2, 0), (4, 0), (4, 2), (4, 4)]
    assert records[4]["store/batch_reused"] == 2 and records[4]["store/batch_reads_max"] == 2
    assert records[2]["store/replay_size"] == 4 and records[4]["store/replay_size"] == 0
    assert read_checkpoint_meta(run.root, 2).reader.replay
    assert not read_checkpoint_meta(run.root, 4).reader.replay
    # Every chunk was read twice over: checkpoint 4 let them all be collected.
    assert list_chunks(run.root / "experiences") == []
