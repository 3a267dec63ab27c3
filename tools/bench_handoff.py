"""Benchmark the hand-offs between roles through the run directory: on a local disk, and between two
clients of a network filesystem (two nodes of a cluster, as the roles run there).

Each measurement runs twice, the same work each time: with both sides on the local disk (one path),
and with the producer working through one client of the volume and the consumer through another
(`--clients A B`: the same directory of one network filesystem mounted twice, e.g. GlusterFS's FUSE
client; tools/shared_fs.sh sets one up). Every side is a process of its own, with rfthpc's own code:

1. commit -> trainer has the group: an explorer process commits one group per chunk (the real
   `ChunkWriter`: a new chunk name and a ring of the store's doorbell per commit) every
   `--interval` seconds, jittered; a trainer process takes groups one at a time (the real
   `StoreReader.take`, waiting through the one waiting mechanism). Latency: when `take` returned
   the group minus when its commit returned (one machine: one clock).
2. publish -> explorer loads: a trainer process publishes a new version of a tiny model every
   `--interval` seconds with the real `Publisher` (deltas between full snapshots, as a trainer
   publishes 16-bit weights); an explorer process follows with the real `WeightFollower` and the
   transformers engine: it prefetches each version into node-local staging and loads it in place as
   soon as it is staged. Latency: when the engine holds the version minus when `publish` returned.
3. the demo (configs/tiny-cpu.yaml: an SFT warm-up, then GRPO with vLLM rollouts and evaluations),
   its roles started as `rfthpc run` starts them, with the trainer on one client and the explorer on
   the other, against the same run with both on the local disk; in rounds of local, volume, volume,
   local (the machine's drift falls on both sides alike), the ratio of the two sides' medians.

Figures (the last line): `FIGURES commit_visible_p99_s=… publish_load_p99_s=… demo_wall_vs_local=…
fs=…`, the volume's, then `local_commit_visible_p99_s=…` and `local_publish_load_p99_s=…` (each p50
beside it) for comparison.

Usage: python tools/bench_handoff.py --clients DIR_A DIR_B [--local DIR] [--trials 50] [--interval 0.5] [--no-demo]
       [--demo-rounds 1]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Args:
    """Hand-off benchmark settings."""

    clients: tuple[str, ...] = ()
    """The same directory of a network filesystem through two of its clients (producer's, consumer's)."""
    local: str | None = None
    """A directory on the local disk (default: a temporary one)."""
    trials: int = 50
    """Hand-offs measured per measurement and filesystem."""
    interval: float = 0.5
    """Mean seconds between two hand-offs (each drawn uniformly within +-50 %)."""
    demo: bool = True
    """Also run the demo on both filesystems (about 2 minutes a run on two cores)."""
    demo_rounds: int = 1
    """Rounds of demo runs, each local, volume, volume, local."""


# ---- 1. commit -> trainer has the group ------------------------------------------------------------


def _committer(run: str, trials: int, interval: float, out) -> None:
    import numpy as np

    from rfthpc.store.schema import Group, StoredExperience
    from rfthpc.store.writer import ChunkWriter

    writer = ChunkWriter(Path(run), "bench", 0, groups_per_chunk=1, max_chunk_delay_s=3600)
    committed = {}
    rng = random.Random(0)
    time.sleep(1.0)  # the reader is waiting
    for i in range(trials):
        time.sleep(interval * rng.uniform(0.5, 1.5))
        tokens = np.arange(8, dtype=np.int32) + 3
        group = Group(task_id=f"t{i}", policy_version=0, explorer="bench", rank=0, experiences=[
            StoredExperience(prompt_ids=tokens, response_ids=tokens, logprobs=np.zeros(8, np.float32),
                             loss_mask=np.ones(8, np.int8), reward=1.0)])
        writer.add(group)  # one group per chunk: committed here
        committed[group.group_id] = time.time()
    writer.close()
    out.put(committed)


def _taker(run: str, trials: int, out) -> None:
    from rfthpc.store.reader import StoreReader

    reader = StoreReader(Path(run), poll_s=0.1)
    arrived = {}
    for _ in range(trials):
        (group,) = reader.take(1, current_version=0, timeout_s=120)
        arrived[group.group_id] = time.time()
    out.put(arrived)


def commit_latencies(producer: Path, consumer: Path, args: Args) -> list[float]:
    """Seconds from each commit to the trainer's `take` returning its group."""
    ctx = mp.get_context("spawn")
    sent, got = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_taker, args=(str(consumer), args.trials, got)),
             ctx.Process(target=_committer, args=(str(producer), args.trials, args.interval, sent))]
    for p in procs:
        p.start()
    committed, arrived = sent.get(timeout=600), got.get(timeout=600)
    for p in procs:
        p.join(60)
    return [arrived[g] - committed[g] for g in committed]


# ---- 2. publish -> explorer loads -------------------------------------------------------------------


def _publisher(run: str, model: str, trials: int, interval: float, out) -> None:
    import torch
    from safetensors.torch import load_file

    from rfthpc.weights.published import TensorStream
    from rfthpc.weights.publisher import Publisher

    state = {k: v.to(torch.bfloat16) for k, v in load_file(str(Path(model) / "model.safetensors")).items()}
    publisher = Publisher(Path(run), Path(model), torch.bfloat16, "on", full_every=10)
    publisher.publish(0, TensorStream.of(state, torch.bfloat16))
    rng = random.Random(1)
    gen = torch.Generator().manual_seed(1)
    published = {}
    time.sleep(3.0)  # the explorer has its engine
    for version in range(1, trials + 1):
        time.sleep(interval * rng.uniform(0.5, 1.5))
        for t in state.values():  # an RL step changes a few percent of the 16-bit values
            t.add_(torch.randn(t.shape, generator=gen).to(t.dtype) * 1e-3 * (torch.rand(t.shape, generator=gen) < 0.03))
        publisher.publish(version, TensorStream.of(state, torch.bfloat16))
        published[version] = time.time()
    out.put(published)


def _follower(run: str, model: str, trials: int, out) -> None:
    from rfthpc.engines.base import EngineSettings
    from rfthpc.engines.hf_engine import TransformersEngine
    from rfthpc.rundir.paths import RunDir
    from rfthpc.sharedfs.handoff import Waiter, WaitPolicy
    from rfthpc.weights.follow import WeightFollower

    follower = WeightFollower(RunDir(run), "bench", 0, poll_s=1.0)
    engine = TransformersEngine(EngineSettings(model_path=model))
    follower.attach(engine, 0)
    waiter = Waiter(WaitPolicy(slow_s=1.0))
    loaded = {}
    try:
        while len(loaded) < trials:
            got = waiter.wait(lambda: follower.update() or None, follower.doorbells(), 120)
            if got is None:
                break
            loaded[follower.version] = time.time()
    finally:
        follower.close()
    out.put(loaded)


def publish_latencies(producer: Path, consumer: Path, model: Path, args: Args) -> list[float]:
    """Seconds from each `publish` returning to the explorer's engine holding that version (versions
    published while the previous one was still being staged are skipped over, as an explorer does)."""
    ctx = mp.get_context("spawn")
    sent, got = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_follower, args=(str(consumer), str(model), args.trials, got)),
             ctx.Process(target=_publisher, args=(str(producer), str(model), args.trials, args.interval, sent))]
    procs[0].start()
    time.sleep(2.0)
    procs[1].start()
    published = sent.get(timeout=900)
    procs[1].join(60)
    try:
        loaded = got.get(timeout=120)
    finally:
        procs[0].join(60)
    return [loaded[v] - published[v] for v in published if v in loaded]


# ---- 3. the demo ---------------------------------------------------------------------------------


def demo_wall(trainer_root: Path, explorer_root: Path, data: Path, name: str) -> float:
    """Seconds the demo's roles take, started as `rfthpc run` starts them (`plan_roles`: the same commands
    and threads), the trainer's run directory under `trainer_root` and the explorers' the same
    directory under `explorer_root` (another client of it, or the same path)."""
    from rfthpc.config import load_config
    from rfthpc.launch.local import plan_roles
    from rfthpc.launch.run_dir import prepare_run_dir

    os.environ.update({"RFTHPC_DEMO_DIR": str(data), "RFTHPC_CHECKPOINT_ROOT_DIR": str(trainer_root)})
    loaded = load_config(ROOT / "configs" / "tiny-cpu.yaml", ["--name", name])
    run = prepare_run_dir(loaded)
    elsewhere = str(explorer_root / run.root.relative_to(trainer_root))
    roles = plan_roles(loaded.stages, run)
    for role in roles:
        if role.name != "trainer":
            role.argv[role.argv.index("--run-dir") + 1] = elsewhere
    start = time.monotonic()
    for role in roles:
        role.start()
    codes = [role.proc.wait(1800) for role in roles]
    wall = time.monotonic() - start
    for role in roles:
        role.log_file.close()
    if any(codes):
        raise SystemExit(f"the demo failed (exit codes {codes}); see {run.log}")
    return wall


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[max(0, int(round(0.99 * len(ordered))) - 1)]


def _fs_type(path: Path) -> str:
    from rfthpc.sharedfs.mounts import mount_of

    mount = mount_of(path)
    return mount.fstype if mount is not None else "unknown"


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print the figures."""
    args = tyro.cli(Args, args=argv)
    if len(args.clients) != 2:
        raise SystemExit("--clients: give the same directory of a network filesystem through two clients")
    local = Path(args.local) if args.local else Path(tempfile.mkdtemp(prefix="rfthpc-bench-handoff-"))
    tag = uuid.uuid4().hex[:8]
    a, b = (Path(c) / f"bench-handoff-{tag}" for c in args.clients)
    a.mkdir(parents=True)
    if not b.is_dir():
        raise SystemExit(f"{b} does not show {a}: --clients must be the same directory through two clients")
    local_run = local / f"bench-handoff-{tag}"
    local_run.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="rfthpc-bench-handoff-model-"))
    try:
        from rfthpc.demos.tinymodel import build_tiny_model

        model = build_tiny_model(work / "model", size="demo", seed=0)
        figures: dict[str, float] = {}
        for label, producer, consumer in (("local_", local_run, local_run), ("", a, b)):
            for name in ("commit", "publish"):
                (producer / name).mkdir()
                (producer / name / "config.yaml").write_text("mode: both\n")
            commits = commit_latencies(producer / "commit", consumer / "commit", args)
            loads = publish_latencies(producer / "publish", consumer / "publish", model, args)
            (figures[f"{label}commit_visible_p50_s"], figures[f"{label}commit_visible_p99_s"]) = _percentiles(commits)
            (figures[f"{label}publish_load_p50_s"], figures[f"{label}publish_load_p99_s"]) = _percentiles(loads)
            where = "the local disk" if label else f"two clients ({args.clients[0]}, {args.clients[1]})"
            print(f"{where}: commit -> trainer has it p50 {figures[label + 'commit_visible_p50_s']:.3f} s, "
                  f"p99 {figures[label + 'commit_visible_p99_s']:.3f} s ({len(commits)}); publish -> explorer "
                  f"loads p50 {figures[label + 'publish_load_p50_s']:.3f} s, p99 "
                  f"{figures[label + 'publish_load_p99_s']:.3f} s ({len(loads)} of {args.trials})", flush=True)
        if args.demo:
            from rfthpc.demos.gsm8k import MakeDemoArgs, make_demo

            make_demo(MakeDemoArgs(out=work / "demo-data", seed=0))
            walls: dict[str, list[float]] = {"local": [], "volume": []}
            for _ in range(args.demo_rounds):
                for side in ("local", "volume", "volume", "local"):
                    where = (local_run, local_run) if side == "local" else (a, b)
                    walls[side].append(demo_wall(*where, work / "demo-data", f"{side}-{tag}-{len(walls[side])}"))
            local_wall, volume_wall = statistics.median(walls["local"]), statistics.median(walls["volume"])
            figures["demo_wall_vs_local"] = volume_wall / local_wall
            print(f"demo: {local_wall:.0f} s on the local disk, {volume_wall:.0f} s with the trainer and the "
                  f"explorer on two clients ({figures['demo_wall_vs_local']:.2f}x; medians of local "
                  f"{', '.join(f'{w:.0f}' for w in walls['local'])} and volume "
                  f"{', '.join(f'{w:.0f}' for w in walls['volume'])})", flush=True)
        line = " ".join(f"{k}={v:.4g}" for k, v in figures.items() if not k.startswith("local_"))
        local_line = " ".join(f"{k}={v:.4g}" for k, v in figures.items() if k.startswith("local_"))
        print(f"FIGURES {line} fs={_fs_type(a)} {local_line}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(a, ignore_errors=True)
        shutil.rmtree(local_run, ignore_errors=True)
        if not args.local:
            shutil.rmtree(local, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
