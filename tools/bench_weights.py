"""Benchmark weight hand-off at scale: bf16 deltas against full snapshots, prefetching explorers
against a cold load at each sync.

A Qwen2-shaped model of ~103M parameters (`bench100m`: 12 layers, hidden 768, GQA) is trained
with AdamW at lr 1e-6 on real gradients of the demo task (the log-likelihood of correct answers to
the demo's arithmetic problems, in its chat template). After every step the policy is published in
bf16 twice, side by side and in alternating order:

- run A: what rfthpc publishes by default for bf16 (`synchronizer.weight_deltas: auto`): a delta
  against the previous version, plus a full snapshot every `full_snapshot_interval` versions;
- run B: a full snapshot every version (`weight_deltas: off`), what explorers read before;
- run C: LoRA (`model.lora`, rank `--lora-rank` on every linear layer), trained alongside on the same
  batches: the adapter alone, in PEFT's layout, is what a LoRA run publishes (and explorers read) at
  every version;
- run D: run A's publication with the node-local copy of a trainer that shares its node with explorers
  (`slurm.layout: colocated`, `rfthpc run`; `rfthpc.weights.node_local`), followed by an explorer that
  links that copy instead of rebuilding the version from the run directory.

Explorers follow run A with the real `WeightFollower` (background prefetch into node-local staging,
then an in-place load between batches) for two engines: transformers (in this process) and the
vLLM CPU engine (its own process, as in an explorer). The stall of a sync is that in-place load.
It is compared with a cold load: the same engine loading the same version's full snapshot of run
B after its pages were dropped from the page cache (`posix_fadvise(DONTNEED)`, so the bytes come
from the disk, as they come from the shared filesystem on another node).

Figures (the last line):
- delta_bytes_vs_full: mean delta file size / full snapshot size (what an explorer reads per sync);
- write_bytes_vs_full: bytes run A writes per version (deltas and its periodic snapshots) / run B's;
- delta_bytes_vs_full_index_value: the same as delta_bytes_vs_full with the other encoding that
  was measured (changed indices, delta-coded, and their new values, zstd-compressed);
- publish_s_vs_full: run A's total publish seconds / run B's;
- explorer_stall_vs_cold_load (transformers) and explorer_stall_vs_cold_load_vllm: median stall /
  median cold load;
- lora_bytes_per_sync: bytes of run C's publication per version (its adapter_model.safetensors),
  next to full_bytes_per_sync and delta_bytes_per_sync (run B's snapshot, run A's mean delta);
- lora_bytes_vs_full: lora_bytes_per_sync / full_bytes_per_sync;
- node_local_prefetch_vs_run_dir: median prefetch seconds of run D's explorer (the copy linked) / run A's
  transformers explorer (the version rebuilt from the run directory's deltas and snapshots);
- node_local_publish_s_vs_run_dir: run D's total publish seconds (the copy written in the same pass) / run A's;
- bitexact: 1 if every staged version equals, bit for bit, the bf16 weights the trainer published
  (and `rfthpc weights materialize` of the last version does too).

Usage:
    python tools/bench_weights.py [--versions 20] [--size bench100m] [--lora-rank 16] [--work DIR] [--no-vllm]
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Args:
    """Weight hand-off benchmark settings."""

    versions: int = 20
    """Policy versions published (one AdamW step each)."""
    size: str = "bench100m"
    """Model size (rfthpc.demos.tinymodel)."""
    batch: int = 8
    """Demo problems per training step."""
    lr: float = 1e-6
    work: str | None = None
    """Scratch directory (default: a temporary one, removed afterwards)."""
    vllm: bool = True
    """Also follow with the vLLM CPU engine."""
    lora_rank: int = 16
    """Rank of run C's adapter (lora_alpha is twice it, on every linear layer)."""
    lora_lr: float = 1e-5
    """Learning rate of run C's adapter (LoRA trains at a larger rate than the whole model)."""


def demo_batches(tokenizer, batch: int, seed: int = 0):
    """Endless batches of (input ids, labels) from the demo task: prompt in the chat template, the
    correct answer as the target (prompt tokens masked)."""
    import torch

    from rfthpc.demos.tinymodel import Difficulty, generate_problem

    rng = random.Random(seed)
    while True:
        ids, labels = [], []
        for _ in range(batch):
            record = generate_problem(rng, Difficulty.level(rng.randint(1, 3)))
            prompt = tokenizer.apply_chat_template([{"role": "user", "content": record["question"]}],
                                                   tokenize=False, add_generation_prompt=True)
            p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            a = tokenizer(record["answer"] + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
            ids.append(p + a)
            labels.append([-100] * len(p) + a)
        width = max(map(len, ids))
        pad = tokenizer.pad_token_id
        yield (torch.tensor([x + [pad] * (width - len(x)) for x in ids]),
               torch.tensor([x + [-100] * (width - len(x)) for x in labels]))


def drop_cache(path: Path) -> None:
    """Drop the (clean, fsynced) pages of every file under `path` from the page cache."""
    for f in Path(path).iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def index_value_bytes(prev: dict, new: dict) -> int:
    """Size of the other encoding measured: per tensor, zstd(delta-coded indices of changed values
    as int32, then their new bit patterns)."""
    import numpy as np
    import zstandard

    from rfthpc.weights.delta import bits

    cctx = zstandard.ZstdCompressor(level=3)
    total = 0
    for name, t in new.items():
        a, b = bits(prev[name]).numpy(), bits(t).numpy()
        idx = np.flatnonzero(a != b).astype(np.int64)
        gaps = np.diff(idx, prepend=0).astype(np.int32)
        total += len(cctx.compress(gaps.tobytes() + b[idx].tobytes()))
    return total


def same_bits(path: Path, truth: dict) -> bool:
    """True if the safetensors under `path` hold exactly `truth`'s bit patterns."""
    import torch

    from rfthpc.weights.delta import bits
    from rfthpc.weights.safetensors_read import SafetensorsDir

    files = SafetensorsDir(path)
    return sorted(files.names()) == sorted(truth) and all(
        torch.equal(bits(files.tensor(n)), bits(truth[n])) for n in truth)


class Follower:
    """An engine following run A through a real WeightFollower, and its cold loads from run B."""

    def __init__(self, name: str, engine, run_a, staging_root: Path | None = None) -> None:
        from rfthpc.weights.follow import WeightFollower

        self.name, self.engine = name, engine
        # Staging where explorers stage by default (/dev/shm: memory).
        self.follower = WeightFollower(run_a, name, 0, staging_root=staging_root, poll_s=0.05)
        self.follower.attach(engine, 0)
        self.stall: list[float] = []
        self.prefetch: list[float] = []
        self.cold: list[float] = []
        self.read: list[int] = []

    def sync(self, version: int, truth: dict) -> bool:
        """Wait for the prefetcher to stage `version` (exploration would go on meanwhile), load it;
        True if the staged bits are the published ones."""
        deadline = time.monotonic() + 600
        while self.follower.ready() != version:
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.name}: version {version} was never staged")
            time.sleep(0.01)
        exact = same_bits(self.follower.staging / f"v{version}", truth)
        self.follower.update()
        s = self.follower.stats
        self.stall.append(s.stall_s)
        self.prefetch.append(s.load_s)
        self.read.append(s.bytes_read)
        return exact

    def cold_load(self, snapshot: Path) -> None:
        drop_cache(snapshot)
        start = time.perf_counter()
        self.engine.load_weights(snapshot)
        self.cold.append(time.perf_counter() - start)

    def close(self) -> None:
        self.follower.close()
        self.engine.close()


class LoRARun:
    """Run C: the model with a LoRA adapter, trained on the same batches and published as a LoRA run
    publishes (the trainer's own code: `rfthpc.trainer.lora`)."""

    def __init__(self, model_dir: Path, run_dir: Path, rank: int, lr: float) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from rfthpc.config.lora import LoRAConfig, LoRASettings
        from rfthpc.trainer import lora
        from rfthpc.weights.publisher import Publisher

        settings = LoRASettings.of(LoRAConfig(lora_rank=rank, lora_alpha=2 * rank))
        self.model = lora.add_adapter(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), settings)
        self.model.train()
        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = torch.optim.AdamW(self.params.values(), lr=lr)
        self.publisher = Publisher(run_dir, model_dir, torch.bfloat16, adapter_config=lora.adapter_config(
            self.model, model_dir))
        self.sizes: list[int] = []

    def step_and_publish(self, version: int, ids, labels) -> None:
        """One AdamW step of the adapter, then its publication as `version`."""
        import torch

        from rfthpc.trainer import lora
        from rfthpc.weights import published as weights

        self.model(input_ids=ids, labels=labels).loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        state = lora.peft_state(self.model, {n: p.detach() for n, p in self.params.items()})
        self.sizes.append(self.publisher.publish(version, weights.TensorStream.of(state, torch.bfloat16)).full_bytes)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    args = tyro.cli(Args, args=argv)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="rfthpc-bench-weights-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return run(args, work)
    finally:
        if not args.work:
            import shutil

            shutil.rmtree(work, ignore_errors=True)


def run(args: Args, work: Path) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rfthpc.config.synchronizer import SynchronizerConfig
    from rfthpc.demos.tinymodel import build_tiny_model
    from rfthpc.engines.base import EngineSettings
    from rfthpc.engines.hf_engine import TransformersEngine
    from rfthpc.rundir.paths import RunDir
    from rfthpc.weights import chain as weight_chain
    from rfthpc.weights import node_local
    from rfthpc.weights import published as weights
    from rfthpc.weights.publisher import Publisher

    torch.manual_seed(0)
    model_dir = build_tiny_model(work / "model", args.size, seed=0, tie_word_embeddings=False)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    print(f"model: {args.size}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters; AdamW lr {args.lr}; "
          f"{args.versions} versions in bf16", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    interval = SynchronizerConfig().full_snapshot_interval
    run_a, run_b, run_c = RunDir(work / "a").create(), RunDir(work / "b").create(), RunDir(work / "c").create()
    run_d = RunDir(work / "d").create()
    shm = node_local.default_staging_root()
    lora_run = LoRARun(model_dir, run_c.root, args.lora_rank, args.lora_lr)
    pub_a = Publisher(run_a.root, model_dir, torch.bfloat16, "auto", full_every=interval)
    pub_b = Publisher(run_b.root, model_dir, torch.bfloat16, "off")
    pub_d = Publisher(run_d.root, model_dir, torch.bfloat16, "auto", full_every=interval,
                      node_local_root=node_local.node_local_dir(shm, run_d.root))
    local = Follower("hf-node-local", TransformersEngine(EngineSettings(model_path=str(model_dir))), run_d, shm)
    followers = [Follower("hf", TransformersEngine(EngineSettings(model_path=str(model_dir))), run_a)]
    if args.vllm:
        from rfthpc.engines.vllm_engine import VLLMEngine

        vllm = VLLMEngine(EngineSettings(model_path=str(model_dir), dtype="float32", max_model_len=256,
                                         cpu_kvcache_space_gb=1))
        followers.append(Follower("vllm", vllm, run_a))
    batches = demo_batches(tokenizer, args.batch)
    secs_d: list[float] = []
    secs_a, secs_b, full_sizes, delta_sizes, iv_sizes, written_a, written_b = [], [], [], [], [], 0, 0
    exact = True
    prev = None
    try:
        for v in range(1, args.versions + 1):
            ids, labels = next(batches)
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state = model.state_dict()
            truth = {k: t.to(torch.bfloat16) for k, t in state.items()}
            order = [(pub_a, secs_a), (pub_b, secs_b), (pub_d, secs_d)]
            order = order if v % 2 else order[::-1]
            pubs = {}
            for pub, secs in order:
                start = time.perf_counter()
                pubs[id(pub)] = pub.publish(v, weights.TensorStream.of(state, torch.bfloat16))
                secs.append(time.perf_counter() - start)
            a, b = pubs[id(pub_a)], pubs[id(pub_b)]
            lora_run.step_and_publish(v, ids, labels)
            written_a += a.full_bytes + a.delta_bytes
            written_b += b.full_bytes
            full_sizes.append(b.full_bytes)
            if a.delta_bytes:
                delta_sizes.append(a.delta_bytes)
                iv_sizes.append(index_value_bytes(prev, truth))
            for f in followers:
                exact &= f.sync(v, truth)
                f.cold_load(weights.step_dir(run_b.root, v))
            exact &= local.sync(v, truth)
            print(f"version {v}: loss {loss.item():.3f}; publish delta-mode {secs_a[-1]:.2f} s "
                  f"({'full+' if a.full_bytes else ''}delta {a.delta_bytes / 1e6:.1f} MB), full-mode {secs_b[-1]:.2f} s "
                  f"({b.full_bytes / 1e6:.0f} MB), LoRA {lora_run.sizes[-1] / 1e6:.2f} MB; " + "; ".join(
                      f"{f.name}: prefetch {f.prefetch[-1]:.2f} s, stall {f.stall[-1]:.3f} s, cold load "
                      f"{f.cold[-1]:.3f} s" for f in followers) + f"; node-local: publish {secs_d[-1]:.2f} s, prefetch "
                  f"{local.prefetch[-1]:.3f} s, stall {local.stall[-1]:.3f} s", flush=True)
            prev = truth
            weight_chain.collect_published(run_a.root, keep=3, lease_s=300)
            weight_chain.collect_published(run_b.root, keep=3, lease_s=300)
            weight_chain.collect_published(run_c.root, keep=3, lease_s=300)
            weight_chain.collect_published(run_d.root, keep=3, lease_s=300)
        out = work / "materialized"
        weight_chain.materialize(run_a.root, args.versions, out)
        exact &= same_bits(out, prev)
    finally:
        for f in (*followers, local):
            f.close()
        pub_d.close()
        node_local.clear(node_local.node_local_dir(shm, run_d.root))
    full = statistics.mean(full_sizes)
    d = statistics.mean(delta_sizes)
    adapter = statistics.mean(lora_run.sizes)
    print(f"bytes per version: full snapshot {full / 1e6:.1f} MB, delta mean {d / 1e6:.2f} MB "
          f"(min {min(delta_sizes) / 1e6:.2f}, max {max(delta_sizes) / 1e6:.2f}), LoRA rank {args.lora_rank} adapter "
          f"{adapter / 1e6:.2f} MB")
    for k in (1, 5, 10, 20, 50):
        write = full if k == 1 else d + full / k
        print(f"  full_snapshot_interval {k:>2}: the trainer writes {write / full:.3f} of a snapshot per version; "
              f"a new explorer reads up to {(full + (k - 1) * d) / full:.2f} snapshots")
    stall = {f.name: statistics.median(f.stall) / statistics.median(f.cold) for f in followers}
    for f in followers:
        print(f"{f.name}: stall median {statistics.median(f.stall):.3f} s, cold load median "
              f"{statistics.median(f.cold):.3f} s, prefetch median {statistics.median(f.prefetch):.2f} s")
    figures = {
        "delta_bytes_vs_full": d / full,
        "write_bytes_vs_full": written_a / written_b,
        "delta_bytes_vs_full_index_value": statistics.mean(iv_sizes) / full,
        "publish_s_vs_full": sum(secs_a) / sum(secs_b),
        "explorer_stall_vs_cold_load": stall["hf"],
        "full_bytes_per_sync": int(full),
        "delta_bytes_per_sync": int(d),
        "lora_bytes_per_sync": int(adapter),
        "lora_bytes_vs_full": adapter / full,
    }
    assert local.follower.stats.node_local_loads == args.versions, "run D's explorer did not link every version"
    run_dir_prefetch = statistics.median(followers[0].prefetch)
    figures["node_local_prefetch_vs_run_dir"] = statistics.median(local.prefetch) / run_dir_prefetch
    figures["node_local_publish_s_vs_run_dir"] = sum(secs_d) / sum(secs_a)
    print(f"node-local: prefetch median {statistics.median(local.prefetch):.3f} s (run directory "
          f"{run_dir_prefetch:.3f} s), publish {sum(secs_d):.1f} s (without the copy "
          f"{sum(secs_a):.1f} s)")
    if "vllm" in stall:
        figures["explorer_stall_vs_cold_load_vllm"] = stall["vllm"]
    figures["bitexact"] = int(exact)
    print("FIGURES " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
