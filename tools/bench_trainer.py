"""Benchmark the trainer against the physical limits it runs on.

1. Training: the real trainer (`rfthpc.trainer.loop`, FSDP2, GRPO, store reads, metrics) against a
   bare torch loop (a plain Hugging Face model, the same fused AdamW, forward/backward/step) on the
   same batches and micro-batches. Figure: trainer tokens/s / bare tokens/s (target >= 0.9). A trainer step is
   the time between two consecutive steps' metrics (reading experience, advantages, metrics,
   trainer_meta all included); weights are published only at the start and end of the stage,
   which the second figure measures on its own. Bare loop and trainer alternate (bare, trainer,
   bare, trainer, bare) and medians of step times are compared; still, other processes on a shared
   machine move both by factors of several: measure on an idle one (the step times are printed).
2. Weights: publishing the policy (`weights/step_N`: gather, safetensors, fsync, STABLE, rename)
   plus an explorer's in-place load into a running vLLM engine, against a raw copy of the same
   bytes on the same filesystem with the same durability (`shutil.copyfile` of every file of the
   published directory, each fsynced, then the directory). Figure: (publish + load) / copy (target
   <= 1.5). The engine runs in its own process, as an explorer's does; each round publishes a
   fresh step, copies it and loads it, one after the other, and the figure is the median over
   rounds of (publish + load) / copy, so that load from other processes moves all three alike.

Usage:
    python tools/bench_trainer.py [--size bench30m] [--steps 7] [--groups 4] [--repeat 4]
                                  [--prompt-len 48] [--response-len 80] [--work DIR] [--no-vllm]

The last line is `FIGURES trainer_vs_bare=... publish_load_vs_copy=... publish_load_s=...`.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Args:
    """Trainer benchmark settings."""

    size: str = "bench30m"
    """Tiny model size (rfthpc.tinymodel): tiny, small or bench30m."""
    steps: int = 7
    """Steps per run (two trainer runs, three bare runs); the first of each run is warm-up, not timed.
    Step times vary by ~10 % on a shared machine: six timed steps a run keep the medians steady."""
    groups: int = 4
    """Experience groups (tasks) per step."""
    repeat: int = 4
    """Responses per group."""
    prompt_len: int = 48
    """Prompt tokens per group."""
    response_len: int = 80
    """Response tokens per response."""
    repeats: int = 9
    """Publish / copy / load rounds (medians are reported)."""
    work: Path | None = None
    """Working directory on the filesystem to measure (default: a temporary directory)."""
    vllm: bool = True
    """Measure the explorer's in-place load with vLLM (else publish alone is compared)."""


def make_groups(n_steps: int, args: Args, vocab: int, seed: int = 0):
    """Random but well-formed groups: fixed lengths so every step has the same tokens."""
    from rfthpc.store import Experience, Group

    rng = np.random.default_rng(seed)
    groups = []
    for i in range(n_steps * args.groups):
        prompt = rng.integers(3, vocab, size=args.prompt_len)
        exps = [Experience(prompt_ids=prompt, response_ids=rng.integers(3, vocab, size=args.response_len),
                           logprobs=-rng.uniform(5, 8, size=args.response_len).astype(np.float32),
                           loss_mask=np.ones(args.response_len, np.int8), reward=float(rng.integers(0, 2)))
                for _ in range(args.repeat)]
        groups.append(Group(task_id=f"t{i}", experiences=exps, policy_version=0, explorer="bench", rank=0))
    return groups


def bench_trainer(model: Path, work: Path, args: Args, groups: list, budget: int) -> tuple[list[float], float]:
    """Run the real trainer on `groups`; return (seconds of its steps after the first, tokens per step)."""
    from rfthpc.config import Config, dump_yaml
    from rfthpc.monitor import read_metrics
    from rfthpc.rundir import RunDir
    from rfthpc.store import ChunkWriter
    from rfthpc.trainer.loop import run_trainer

    cfg = Config(project="bench", name="trainer", mode="train")
    cfg.model.model_path = str(model)
    cfg.model.max_model_len = args.prompt_len + args.response_len
    cfg.model.max_response_tokens = args.response_len
    cfg.algorithm.algorithm_type = "grpo"
    cfg.algorithm.repeat_times = args.repeat
    cfg.algorithm.kl_loss_fn = "none"
    cfg.buffer.batch_size = args.groups
    cfg.buffer.total_steps = args.steps
    cfg.trainer.max_token_len_per_gpu = budget
    cfg.trainer.save_hf_checkpoint = "never"
    cfg.synchronizer.sync_interval = args.steps + 1
    cfg.synchronizer.sync_offset = 10 * args.steps
    cfg.monitor.monitor_type = []
    cfg.cluster.gpu_per_node = 0
    run = RunDir(work / "run").create()
    run.config.write_text(dump_yaml(cfg))
    with ChunkWriter(run.root, "bench", 0, groups_per_chunk=args.groups) as w:
        for g in groups:
            w.add(g)
    code = run_trainer(run.root)
    if code != 0:
        raise SystemExit(f"the trainer exited with {code}; see {run.root}")
    records = [r for r in read_metrics(run.monitor / "trainer.jsonl") if "actor/lr" in r]
    times = [b["time"] - a["time"] for a, b in itertools.pairwise(records)]
    return times, records[-1]["perf/total_num_tokens"]


def bench_bare(model_dir: Path, groups: list, args: Args, budget: int) -> list[float]:
    """The same batches through a plain model: forward, policy-gradient loss, backward, AdamW step.
    Returns the seconds of the steps after the first."""
    import torch
    from transformers import AutoModelForCausalLM

    from rfthpc.trainer.batching import collate, plan_micro_batches
    from rfthpc.trainer.samples import samples_from_groups

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.config.use_cache = False
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=True)
    times = []
    for step in range(args.steps):
        batch = samples_from_groups(groups[step * args.groups:(step + 1) * args.groups], 10**9, None)
        adv = torch.tensor([s.reward - 0.5 for s in batch])
        plan = plan_micro_batches(batch, list(range(len(batch))), 1, token_budget=budget, micro_batch_size=1)
        total = sum(int(s.loss_mask.sum()) for s in batch)
        start = time.perf_counter()
        for idx in plan.micro[0]:
            mb = collate(batch, idx, torch.device("cpu"))
            logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
            picked = torch.gather(logits, 1, mb.positions.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
            lp = torch.gather(torch.log_softmax(picked.float(), -1), -1, mb.response_ids.unsqueeze(-1)).squeeze(-1)
            loss = -(adv[idx].unsqueeze(-1) * lp * mb.response_mask).sum() / total
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times[1:]


def copy_dir(published: Path, dst: Path) -> float:
    """Copy every file of a published step to `dst` on the same filesystem (read, write, fsync
    each, then fsync the directory): the bytes and durability of a publish, with nothing else.
    Returns the seconds taken."""
    from rfthpc.fsutil import fsync_dir

    files = sorted(f for f in published.iterdir() if f.is_file())
    dst.mkdir()
    start = time.perf_counter()
    for f in files:
        shutil.copyfile(f, dst / f.name)
        with open(dst / f.name, "rb") as fh:
            os.fsync(fh.fileno())
    fsync_dir(dst)
    return time.perf_counter() - start


def explorer_loader(conn: Connection, model_dir: str, max_model_len: int) -> None:
    """An explorer-like process: a running vLLM engine that loads, in place, each step directory it
    is sent and replies with the seconds the load took (None ends it)."""
    from rfthpc.engines.base import EngineSettings
    from rfthpc.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(EngineSettings(model_path=model_dir, dtype="float32", max_model_len=max_model_len,
                                       cpu_kvcache_space_gb=1))
    try:
        # An explorer has loaded weights before: the first load's one-time costs are not timed.
        engine.load_weights(Path(model_dir))
        conn.send("ready")
        while (path := conn.recv()) is not None:
            start = time.perf_counter()
            engine.load_weights(Path(path))
            conn.send(time.perf_counter() - start)
    finally:
        engine.close()


def bench_weights(model_dir: Path, work: Path, args: Args) -> tuple[list[float], list[float], list[float], Path]:
    """`repeats` rounds of: publish a fresh step from the sharded model, copy it, load it into the
    explorer process's engine. Returns the publish, load and copy seconds and a published step."""
    import torch

    from rfthpc import weights
    from rfthpc.rundir import RunDir
    from rfthpc.trainer.dist import init_distributed
    from rfthpc.trainer.fsdp import build_sharded_model, publish_model
    from rfthpc.weight_publisher import Publisher

    ctx = mp.get_context("spawn")
    conn, child = ctx.Pipe()
    loader = ctx.Process(target=explorer_loader, args=(child, str(model_dir), args.prompt_len + args.response_len))
    if args.vllm:
        loader.start()
        if conn.recv() != "ready":
            raise SystemExit("the explorer process did not start its engine")
    run = RunDir(work / "publish").create()
    env = init_distributed()
    publish, load, copy = [], [], []
    try:
        model = build_sharded_model(model_dir, env)
        # Full snapshots every time: this figure is the bytes' cost (tools/bench_weights.py measures deltas).
        publisher = Publisher(run.root, model_dir, torch.float32, delta="off")
        for i in range(args.repeats):
            # The three in a row, round after round: load from other processes moves them alike.
            time.sleep(0.5)
            start = time.perf_counter()
            publish_model(model, env, run.root, 100 + i, publisher)
            step = weights.step_dir(run.root, 100 + i)
            publish.append(time.perf_counter() - start)
            copy.append(copy_dir(step, work / f"copy{i}"))
            if args.vllm:
                conn.send(str(step))
                load.append(conn.recv())
    finally:
        env.close()
        if args.vllm:
            conn.send(None)
            loader.join()
    return publish, load or [0.0] * len(publish), copy, step


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    args = tyro.cli(Args, args=argv)
    from transformers import AutoConfig

    from rfthpc.tinymodel import build_tiny_model

    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_trainer-")
        args.work = Path(tmp.name)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        model = build_tiny_model(work / "model", args.size, seed=0)
        groups = make_groups(args.steps, args, AutoConfig.from_pretrained(model).vocab_size)
        budget = 2 * (args.prompt_len + args.response_len) * args.repeat
        # Bare, trainer, bare, trainer, bare: load from other processes skews both alike.
        bare, trainer = bench_bare(model, groups, args, budget), []
        for i in range(2):
            times, tokens = bench_trainer(model, work / f"trainer{i}", args, groups, budget)
            trainer += times
            bare += bench_bare(model, groups, args, budget)
        ratio = statistics.median(bare) / statistics.median(trainer)
        print(f"training ({args.groups} groups x {args.repeat} x {args.prompt_len}+{args.response_len} = "
              f"{tokens:.0f} tokens per step): trainer {tokens / statistics.median(trainer):.0f} tokens/s, "
              f"bare loop {tokens / statistics.median(bare):.0f} tokens/s")
        print(f"step seconds: trainer {[round(t, 2) for t in trainer]} bare {[round(t, 2) for t in bare]}")
        publish, load, copy, step = bench_weights(model, work, args)
        size = sum(f.stat().st_size for f in step.iterdir())
        p, c, ld = statistics.median(publish), statistics.median(copy), statistics.median(load)
        vs_copy = statistics.median((pi + li) / ci for pi, li, ci in zip(publish, load, copy))
        print(f"weights ({size / 1e6:.1f} MB): publish {p:.3f} s, vLLM in-place load {ld:.3f} s, raw copy {c:.3f} s")
        print(f"weights seconds: publish {[round(t, 3) for t in publish]} load {[round(t, 3) for t in load]} "
              f"copy {[round(t, 3) for t in copy]}")
        print(f"FIGURES trainer_vs_bare={ratio:.3f} publish_load_vs_copy={vs_copy:.3f} "
              f"publish_load_s={p + ld:.3f}")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
