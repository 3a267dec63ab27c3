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
3. Log-prob memory: one policy-loss step (log-probs with the entropy metric, forward and backward)
   of one 8k-token sequence (8,000 response tokens) with Qwen2.5's 151,936-token vocabulary, on a
   one-layer model (hidden 256) in bfloat16: the trainer's chunked LM head
   (`rfthpc.trainer.forward.token_logprobs`) against the full-logits computation it replaced
   (reproduced here, `full_logits_logprobs`). Figure: peak bytes of the tensors the step creates
   and holds at once, after / before (target <= 0.25). A dispatch mode follows every storage the
   step's operators allocate until it is freed (autograd's saved tensors and gradients included;
   what a GPU's `max_memory_allocated` counts, less allocator rounding). The full-logits step holds
   about 30 GiB, more than a small machine has, so both steps run on fake tensors (torch's
   FakeTensorMode: shapes and dtypes, no data, no memory): the count is the same, which the bench
   checks first by running both steps for real and fake at `--logprob-check-tokens`.
4. Padding-free micro-batches: 32 responses in groups of 4 with log-normal lengths (prompts median
   100 tokens, responses median 200 with a long tail to 1,536), cut into micro-batches of at most
   4,096 tokens, padded and padding-free (prompts not shared), through the trainer's forward and
   backward on the `small` tiny model. Figures: the padded micro-batches' share of padding, and
   the padding-free path's tokens/s over the padded path's (CPU time of one thread, medians of
   alternating runs: other processes on a shared machine slow wall-clock time, not this).

Usage:
    python tools/bench_trainer.py [--size bench30m] [--steps 7] [--groups 4] [--repeat 4]
                                  [--prompt-len 48] [--response-len 80] [--work DIR] [--no-vllm]
                                  [--sections training weights logprob padfree]

The last line is `FIGURES name=value ...` with the figures of the sections run: `trainer_vs_bare`,
`publish_load_vs_copy`, `publish_load_s`, `logprob_peak_mem_ratio`, `logprob_peak_before_bytes`,
`logprob_peak_after_bytes`, `padding_fraction`, `padfree_tokens_per_s_ratio`.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
import weakref
from contextlib import nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Self

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Args:
    """Trainer benchmark settings."""

    size: str = "bench30m"
    """Tiny model size (rfthpc.demos.tinymodel): tiny, small or bench30m."""
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
    sections: tuple[str, ...] = ("training", "weights", "logprob", "padfree")
    """Parts to run: training, weights, logprob (memory), padfree."""
    logprob_tokens: int = 8192
    """Tokens of the sequence whose log-prob step's memory is measured."""
    logprob_response: int = 8000
    """Of which response tokens."""
    logprob_vocab: int = 151936
    """Vocabulary (Qwen2.5's)."""
    logprob_hidden: int = 256
    """Hidden size of the one-layer model."""
    logprob_check_tokens: int = 512
    """Length at which both steps run for real and on fake tensors, to check that the counts agree."""
    padfree_groups: int = 8
    """Groups of 4 responses in the padding-free comparison."""
    padfree_budget: int = 4096
    """Tokens per micro-batch there (padded, or real ones padding-free)."""
    padfree_rounds: int = 3
    """Alternating padded / padding-free passes (medians are compared)."""


def make_groups(n_steps: int, args: Args, vocab: int, seed: int = 0):
    """Random but well-formed groups: fixed lengths so every step has the same tokens."""
    from rfthpc.store import Group
    from rfthpc.store import StoredExperience as Experience

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
    from rfthpc.rundir.metrics import read_metrics
    from rfthpc.rundir.paths import RunDir
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
    from rfthpc.sharedfs.fileops import fsync_dir

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

    from rfthpc.rundir.paths import RunDir
    from rfthpc.trainer.dist import init_distributed
    from rfthpc.trainer.fsdp import build_sharded_model, publish_model
    from rfthpc.weights import published as weights
    from rfthpc.weights.publisher import Publisher

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


class LiveBytes:
    """Context manager counting the bytes of tensor storages that operators allocate while it is
    active, from allocation until the storage is freed: `now` and the `peak` of it. Storages that
    existed before (parameters, inputs) are not counted, nor their views."""

    def __init__(self) -> None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves
        from torch.utils.weak import WeakIdKeyDictionary

        self.now = self.peak = 0
        counted = WeakIdKeyDictionary()
        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                given = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor):
                        storage = t.untyped_storage()
                        if id(storage) not in given and storage not in counted:
                            counted[storage] = True
                            counter.allocated(storage.nbytes())
                            weakref.finalize(storage, counter.freed, storage.nbytes())
                return out

        self._mode = Mode()

    def allocated(self, n: int) -> None:
        self.now += n
        self.peak = max(self.peak, self.now)

    def freed(self, n: int) -> None:
        self.now -= n

    def __enter__(self) -> Self:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)


def full_logits_logprobs(model, mb):
    """Log-probs and the entropy metric as rfthpc's trainer computed them before the chunked head:
    the model's logits at every position, those predicting response tokens gathered, a float32 copy
    divided by T, log_softmax over it (the memory reference of section 3)."""
    import torch

    from rfthpc.algorithms import entropy_from_logits

    def response_logits():
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits
        index = mb.positions.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
        picked = torch.gather(logits, 1, index)
        return picked.float() / mb.temperature.view(-1, 1, 1)

    logits = response_logits()
    log_probs = torch.log_softmax(logits, dim=-1)
    token_lp = torch.gather(log_probs, -1, mb.response_ids.unsqueeze(-1)).squeeze(-1)
    return token_lp, entropy_from_logits(logits.detach())


def logprob_step_peak(args: Args, chunked: bool, tokens: int, response: int, fake: bool) -> int:
    """Peak bytes held by one policy-loss step (log-probs with the entropy metric, forward and
    backward) of one sequence on a fresh one-layer model in bfloat16, with the chunked head or the
    full logits; on fake tensors or real ones."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM, Qwen2Config

    from rfthpc.trainer.batching import collate
    from rfthpc.trainer.forward import token_logprobs
    from rfthpc.trainer.samples import Sample

    h, v = args.logprob_hidden, args.logprob_vocab
    config = Qwen2Config(vocab_size=v, hidden_size=h, intermediate_size=4 * h, num_hidden_layers=1,
                         num_attention_heads=max(1, h // 64), num_key_value_heads=1, max_position_embeddings=tokens,
                         tie_word_embeddings=True, use_cache=False)
    rng = np.random.default_rng(0)
    sample = Sample(rng.integers(3, v, size=tokens - response), rng.integers(3, v, size=response),
                    np.ones(response, bool), temperature=0.7)
    mb = collate([sample], [0], torch.device("cpu"))
    mode = FakeTensorMode() if fake else None
    with mode if mode is not None else nullcontext():
        if mode is not None:
            mb = dataclasses.replace(mb, **{f.name: mode.from_tensor(getattr(mb, f.name)) for f in dataclasses.fields(mb)
                                            if isinstance(getattr(mb, f.name), torch.Tensor)})
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).train()
        with LiveBytes() as live:
            lp, _ = token_logprobs(model, mb, with_entropy=True) if chunked else full_logits_logprobs(model, mb)
            (-(lp * mb.response_mask).sum() / mb.response_mask.sum()).backward()
    return live.peak


def bench_logprob_memory(args: Args) -> dict[str, float]:
    """Section 3: the log-prob step's peak memory, chunked head / full logits."""
    small = (args.logprob_check_tokens, args.logprob_check_tokens * args.logprob_response // args.logprob_tokens)
    for chunked in (False, True):
        real, fake = (logprob_step_peak(args, chunked, *small, fake=f) for f in (False, True))
        name = "chunked head" if chunked else "full logits"
        print(f"log-prob step at {small[0]} tokens, {name}: {real / 2**20:.1f} MiB real, {fake / 2**20:.1f} MiB fake")
        if abs(real - fake) > 0.01 * real:
            raise SystemExit(f"the fake-tensor count ({fake}) is not the real one ({real}): the figures would be wrong")
    before, after = (logprob_step_peak(args, chunked, args.logprob_tokens, args.logprob_response, fake=True)
                     for chunked in (False, True))
    print(f"log-prob step at {args.logprob_tokens} tokens ({args.logprob_response} response), vocabulary "
          f"{args.logprob_vocab}, bfloat16: full logits {before / 2**30:.2f} GiB, chunked head {after / 2**30:.2f} GiB")
    return {"logprob_peak_mem_ratio": after / before, "logprob_peak_before_bytes": before,
            "logprob_peak_after_bytes": after}


def padfree_samples(args: Args, vocab: int) -> list:
    """Groups of 4 responses with log-normal prompt and response lengths (a reasoning task's long tail)."""
    from rfthpc.trainer.samples import Sample

    rng = np.random.default_rng(0)
    out = []
    for g in range(args.padfree_groups):
        prompt = rng.integers(3, vocab, size=int(np.clip(rng.lognormal(np.log(100), 0.5), 16, 512)))
        for _ in range(4):
            r = int(np.clip(rng.lognormal(np.log(200), 0.9), 8, 1536))
            out.append(Sample(prompt, rng.integers(3, vocab, size=r), np.ones(r, bool), group=g))
    return out


def bench_padding_free(model_dir: Path, args: Args) -> dict[str, float]:
    """Section 4: padded against padding-free micro-batches through the trainer's forward and backward."""
    import torch
    from transformers import AutoModelForCausalLM

    from rfthpc.trainer import packed_attention
    from rfthpc.trainer.batching import plan_micro_batches
    from rfthpc.trainer.forward import token_logprobs

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    packed_attention.adopt(model)  # as the trainer's models
    samples = padfree_samples(args, model.config.vocab_size)
    real = sum(s.length for s in samples)
    every = list(range(len(samples)))
    plans = {pf: plan_micro_batches(samples, every, 1, token_budget=args.padfree_budget, micro_batch_size=1,
                                    padding_free=pf) for pf in (False, True)}

    def one_pass(padding_free: bool) -> float:
        began = time.process_time()
        for mb in plans[padding_free].micro_batches(samples, 0, torch.device("cpu")):
            lp, _ = token_logprobs(model, mb, with_entropy=True)
            (-(lp * mb.response_mask).sum()).backward()
        model.zero_grad(set_to_none=True)
        return time.process_time() - began

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one_pass(False)  # warm-up
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.padfree_rounds):
            for pf in (False, True):
                times[pf].append(one_pass(pf))
    finally:
        torch.set_num_threads(threads)
    padded = sum(len(idx) * max(samples[i].length for i in idx) for idx in plans[False].micro[0] if idx)
    rate = {pf: real / statistics.median(t) for pf, t in times.items()}
    print(f"padding-free ({len(samples)} samples, {real} tokens, micro-batches of {args.padfree_budget}): padded "
          f"{plans[False].n_micro} micro-batches, {padded} positions, {rate[False]:.0f} tokens/s; padding-free "
          f"{plans[True].n_micro}, {real}, {rate[True]:.0f} tokens/s (CPU seconds {[round(t, 2) for t in times[False]]} "
          f"/ {[round(t, 2) for t in times[True]]})")
    return {"padding_fraction": 1 - real / padded, "padfree_tokens_per_s_ratio": rate[True] / rate[False]}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    args = tyro.cli(Args, args=argv)
    from transformers import AutoConfig

    from rfthpc.demos.tinymodel import build_tiny_model

    unknown = set(args.sections) - {"training", "weights", "logprob", "padfree"}
    if unknown:
        raise SystemExit(f"--sections: unknown {sorted(unknown)}")
    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_trainer-")
        args.work = Path(tmp.name)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    try:
        if {"training", "weights"} & set(args.sections):
            model = build_tiny_model(work / "model", args.size, seed=0)
        if "training" in args.sections:
            groups = make_groups(args.steps, args, AutoConfig.from_pretrained(model).vocab_size)
            budget = 2 * (args.prompt_len + args.response_len) * args.repeat
            # Bare, trainer, bare, trainer, bare: load from other processes skews both alike.
            bare, trainer = bench_bare(model, groups, args, budget), []
            for i in range(2):
                times, tokens = bench_trainer(model, work / f"trainer{i}", args, groups, budget)
                trainer += times
                bare += bench_bare(model, groups, args, budget)
            figures["trainer_vs_bare"] = f"{statistics.median(bare) / statistics.median(trainer):.3f}"
            print(f"training ({args.groups} groups x {args.repeat} x {args.prompt_len}+{args.response_len} = "
                  f"{tokens:.0f} tokens per step): trainer {tokens / statistics.median(trainer):.0f} tokens/s, "
                  f"bare loop {tokens / statistics.median(bare):.0f} tokens/s")
            print(f"step seconds: trainer {[round(t, 2) for t in trainer]} bare {[round(t, 2) for t in bare]}")
        if "weights" in args.sections:
            publish, load, copy, step = bench_weights(model, work, args)
            size = sum(f.stat().st_size for f in step.iterdir())
            p, c, ld = statistics.median(publish), statistics.median(copy), statistics.median(load)
            vs_copy = statistics.median((pi + li) / ci for pi, li, ci in zip(publish, load, copy))
            print(f"weights ({size / 1e6:.1f} MB): publish {p:.3f} s, vLLM in-place load {ld:.3f} s, raw copy {c:.3f} s")
            print(f"weights seconds: publish {[round(t, 3) for t in publish]} load {[round(t, 3) for t in load]} "
                  f"copy {[round(t, 3) for t in copy]}")
            figures.update(publish_load_vs_copy=f"{vs_copy:.3f}", publish_load_s=f"{p + ld:.3f}")
        if "logprob" in args.sections:
            mem = bench_logprob_memory(args)
            figures.update(logprob_peak_mem_ratio=f"{mem['logprob_peak_mem_ratio']:.3f}",
                           logprob_peak_before_bytes=int(mem["logprob_peak_before_bytes"]),
                           logprob_peak_after_bytes=int(mem["logprob_peak_after_bytes"]))
        if "padfree" in args.sections:
            pad = bench_padding_free(build_tiny_model(work / "small", "small", seed=0), args)
            figures.update({k: f"{v:.3f}" for k, v in pad.items()})
        print("FIGURES " + " ".join(f"{k}={v}" for k, v in figures.items()))
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
