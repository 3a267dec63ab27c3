"""Shared pieces of the trainer tests: a tiny model, run directories, real experience groups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rfthpc.config import Config, dump_yaml
from rfthpc.config.schema import StageConfig
from rfthpc.rundir.paths import RunDir
from rfthpc.store import ChunkWriter, Group
from rfthpc.store import StoredExperience as Experience
from rfthpc.trainer.samples import Sample

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tied-embedding `tiny` Qwen2 (vocab 384) with tokenizer and chat template."""
    from rfthpc.demos.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"), "tiny", seed=0)


def rl_config(model: Path, **changes) -> Config:
    """A GRPO config for the tiny model: 2 groups of 4 per step, small budgets, console off."""
    cfg = Config(project="t", name="run", mode="train")
    cfg.model.model_path = str(model)
    cfg.model.max_model_len = 64
    cfg.model.max_response_tokens = 16
    cfg.algorithm.algorithm_type = "grpo"
    cfg.algorithm.repeat_times = 4
    cfg.algorithm.kl_loss_fn = "none"
    cfg.algorithm.optimizer.lr = 1e-3
    cfg.buffer.batch_size = 2
    cfg.buffer.total_steps = 4
    cfg.buffer.trainer_input.experience_buffer.max_read_timeout = 30.0
    cfg.trainer.max_token_len_per_gpu = 64
    cfg.monitor.monitor_type = []
    cfg.filesystem.poll_interval_s = 0.1
    # Pre-written test data is all version 0: accept it at any step.
    cfg.synchronizer.sync_offset = 1000
    cfg.cluster.gpu_per_node = 0
    for key, value in changes.items():
        obj = cfg
        *parents, leaf = key.split(".")
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, leaf, value)
    return cfg


def sft_stage(dataset: Path, steps: int, batch: int = 4) -> StageConfig:
    """An sft_warmup stage (train mode) on `dataset`."""
    return StageConfig(
        stage_name="sft_warmup", mode="train", algorithm={"algorithm_type": "sft", "optimizer": {"lr": 1e-3}},
        buffer={"train_batch_size": batch, "total_steps": steps,
                "trainer_input": {"experience_buffer": {"path": str(dataset), "format": {"prompt_key": "question",
                                                                                       "response_key": "answer"}}}},
    )


def make_run(root: Path, cfg: Config) -> RunDir:
    """A run directory holding `cfg` as config.yaml, as `rfthpc submit` leaves it."""
    run = RunDir(root).create()
    run.config.write_text(dump_yaml(cfg))
    return run


def random_group(rng: np.random.Generator, task: str, repeat: int, vocab: int, version: int = 0,
                 explorer: str = "ex", rank: int = 0, max_len: int = 12) -> Group:
    """A group of `repeat` random responses with behaviour logprobs and 0/1 rewards."""
    prompt = rng.integers(3, vocab, size=int(rng.integers(2, 8)))
    exps = []
    for _ in range(repeat):
        n = int(rng.integers(1, max_len))
        exps.append(Experience(
            prompt_ids=prompt, response_ids=rng.integers(3, vocab, size=n),
            logprobs=-rng.uniform(4.0, 7.0, size=n).astype(np.float32),
            loss_mask=np.ones(n, np.int8), reward=float(rng.integers(0, 2)),
        ))
    return Group(task_id=task, experiences=exps, policy_version=version, explorer=explorer, rank=rank)


def write_groups(run: RunDir, n: int, repeat: int = 4, vocab: int = 384, seed: int = 0, version: int = 0,
                 per_chunk: int = 2, explorer: str = "ex") -> list[Group]:
    """Commit `n` random groups to the run's store through the real ChunkWriter."""
    rng = np.random.default_rng(seed)
    groups = [random_group(rng, f"t{seed}-{i}", repeat, vocab, version, explorer) for i in range(n)]
    with ChunkWriter(run.root, explorer, 0, groups_per_chunk=per_chunk, max_chunk_delay_s=3600) as w:
        for g in groups:
            w.add(g)
    return groups


def trainer_env(threads: int = 1) -> dict[str, str]:
    """Environment of a trainer subprocess: this checkout on the path, few threads."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def start_trainer(run: RunDir, nproc: int = 1, log_name: str = "trainer.log") -> subprocess.Popen:
    """`rfthpc train --run-dir` in a new process (under torchrun for nproc > 1)."""
    if nproc > 1:
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                "-m", "rfthpc", "train", "--run-dir", str(run.root)]
    else:
        argv = [sys.executable, "-m", "rfthpc", "train", "--run-dir", str(run.root)]
    with open(run.log / log_name, "ab") as log:  # the child keeps its own descriptor
        # Its own session: a test can kill torchrun's workers with it (os.killpg).
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=trainer_env(), cwd=ROOT,
                                start_new_session=True)


def run_trainer_inprocess(run: RunDir) -> int:
    """Train in this process (world size 1): imports stay warm, so tests are faster."""
    from rfthpc.trainer.loop import run_trainer

    return run_trainer(run.root)


def kill_while_writing(script: str, weights_dir: Path, prefix: str, timeout_s: float = 120) -> list[str]:
    """Run `script` (it prints "ready" just before it writes), SIGKILL it once a temporary name
    starting with `prefix` appears in `weights_dir`; return those leftovers."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-c", script], env=trainer_env(), cwd=ROOT, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    deadline = time.monotonic() + timeout_s
    while not any(n.startswith(prefix) for n in os.listdir(weights_dir)):
        assert time.monotonic() < deadline and proc.poll() is None, f"the publisher never started writing {prefix}"
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return [n for n in os.listdir(weights_dir) if n.startswith(prefix)]


def grouped_samples(vocab: int) -> list[Sample]:
    """Three groups of 4 responses (1 to 9 tokens, some masked) to prompts of 2, 6 and 9 tokens, T=0.7."""
    rng = np.random.default_rng(3)
    out = []
    for g, p in enumerate((2, 6, 9)):
        prompt = rng.integers(3, vocab, size=p)
        for _ in range(4):
            r = int(rng.integers(1, 10))
            out.append(Sample(prompt, rng.integers(3, vocab, size=r), rng.random(r) > 0.2, group=g,
                              temperature=0.7))
    return out
