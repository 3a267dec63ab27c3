"""Simulate 16-256 explorers on one run directory, with a networked filesystem's metadata latency.

Each simulated explorer is a process (forked: many per core; the work of each is small) that does
what an explorer does to the run directory, through rfthpc's own code: it claims tasks (`ClaimSet`:
`explorer.claim_shards` shards, each a `TaskClaims` behind the lock the config names, claimed
`explorer.claim_batches` batches at a time, both resolved as the explorer resolves them),
"generates" each batch for a time drawn from a long-tailed distribution (lognormal), commits the
groups through the real `ChunkWriter`, completes its claims once they are committed (settled in its
next transaction, as the explorer does), heartbeats its claims, its weights reader file and its
progress file every `lease_s / 4`, and follows published weights (stats `weights/latest` every
second, names the new version in its reader file). One process is the trainer: a real
`StoreReader` takes batches, marks checkpoints and garbage-collects the store every few seconds,
and publishes a new `weights/latest` every two seconds.

A shim (this simulation only) delays every metadata operation on the run directory (open, stat,
listdir, scandir, rename, replace, link, unlink, mkdir, rmdir, utime, chmod, access, HDF5 file
open) by `--latency-ms` and counts them, so the figures reflect NFS, Lustre or GPFS, where each
costs milliseconds, not the microseconds of a local disk.

Per N it prints: claims/s (tasks handed out), p50/p99 lock wait (acquiring a claims lock; also the
p99 of the steady state, after the start-up herd in which every explorer claims at once), the
fraction of time the busiest claims lock (one per shard) is held and the median hold, commit ->
visible p50/p99 (the reader's first listing of a chunk after its commit), reader groups/s (groups
taken per second of the reader's busy time, waiting excluded), metadata operations per second on
the run directory (all processes), chunk files written per 1000 groups, and groups lost (committed
and completed, never trained) or trained twice. Last line: `FIGURES claims_per_s_256=…
lock_wait_p99_s_256=… lock_wait_p99_steady_s_256=… visible_p99_s_256=… reader_groups_per_s_256=…
metaops_per_s_256=… lost=… twice=…` (for the largest N; lost and twice summed over every N).

On a real network filesystem, give `--latency-ms 0` and `--work` one directory per client of it
(the same directory mounted on each: e.g. GlusterFS's FUSE client mounted twice): explorer i then
works through client i modulo their number, the trainer through the first, so hand-offs cross
clients and their caches as between nodes.

Usage: python tools/sim_scale.py [--n 16 64 128 256] [--seconds 30] [--latency-ms 5] [--work DIR [DIR ...]]
"""

from __future__ import annotations

import builtins
import io
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TASKSET = "sim"


@dataclass
class Args:
    """Scale simulation settings."""

    n: tuple[int, ...] = (16, 64, 128, 256)
    """Numbers of explorer processes, one simulation each."""
    seconds: float = 30.0
    """How long the explorers claim and commit in each simulation."""
    latency_ms: float = 5.0
    """Added to every metadata operation on the run directory (0: the local disk as it is)."""
    claim_size: int = 4
    """Tasks an explorer claims at a time (`ceil(batch_size / array_size)` in a run)."""
    gen_median_s: float = 2.0
    """Median generation time of a batch."""
    gen_sigma: float = 0.8
    """Log-standard deviation of the generation time (long tail: p99 is about 6x the median)."""
    groups_per_chunk: int = 64
    max_chunk_delay: float = 5.0
    lease_s: float = 300.0
    """`filesystem.lease_s` (heartbeats every quarter of it)."""
    lock: str = "link"
    claim_batches: int = 0
    """`explorer.claim_batches` (0: by the number of explorers, as the explorer resolves it)."""
    claim_shards: int = 0
    """`explorer.claim_shards` (0: by the number of explorers, as the explorer resolves it)."""
    read_batch: int = 256
    """Groups per trainer step."""
    work: tuple[str, ...] = ()
    """Scratch directory (default: a temporary one, removed afterwards); several: the same directory
    through different clients of one shared filesystem (explorer i uses the i-th modulo their number)."""


# ---- the metadata-latency shim ---------------------------------------------------------------------


@dataclass
class Shim:
    """Delays and counts metadata operations on paths under `root` (this process only)."""

    root: str
    latency_s: float
    ops: Counter = field(default_factory=Counter)

    def install(self) -> None:
        import h5py

        def delayed(name: str, fn):
            def wrapper(*args, **kwargs):
                path = args[0] if args else kwargs.get("path", kwargs.get("file"))
                if isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(self.root):
                    self.ops[name] += 1
                    if self.latency_s:
                        time.sleep(self.latency_s)
                return fn(*args, **kwargs)
            return wrapper

        for name in ("stat", "lstat", "open", "listdir", "scandir", "rename", "replace", "link", "unlink", "remove",
                     "mkdir", "rmdir", "utime", "chmod", "access"):
            setattr(os, name, delayed(name, getattr(os, name)))
        builtins.open = io.open = delayed("open", io.open)
        original = h5py.File.__init__

        def h5_open(file_self, name, *args, **kwargs):
            if isinstance(name, (str, os.PathLike)) and os.fspath(name).startswith(self.root):
                self.ops["h5open"] += 1
                if self.latency_s:
                    time.sleep(self.latency_s)
            original(file_self, name, *args, **kwargs)

        h5py.File.__init__ = h5_open


class TimedLock:
    """Wraps the claims lock to time each acquisition."""

    def __init__(self, inner, waits: list, holds: list, shard: int) -> None:
        self._inner, self._waits, self._holds, self._shard = inner, waits, holds, shard
        self._since = 0.0

    def __enter__(self):
        start = time.monotonic()
        self._inner.__enter__()
        self._since = time.monotonic()
        self._waits.append((self._since - start, start))
        return self

    def __exit__(self, *exc):
        self._holds.append((self._shard, time.monotonic() - self._since))
        return self._inner.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._inner, name)


# ---- one explorer ------------------------------------------------------------------------------------


def _group(i: int, claim, rng: np.random.Generator):
    from rfthpc.store.schema import Group, TaskRef
    from rfthpc.store.schema import StoredExperience as Experience

    prompt = rng.integers(3, 500, size=24).astype(np.int32)
    exps = [Experience(prompt_ids=prompt, response_ids=rng.integers(3, 500, size=32).astype(np.int32),
                       logprobs=np.full(32, -1.0, np.float32), loss_mask=np.ones(32, np.int8),
                       reward=float(rng.integers(0, 2))) for _ in range(4)]
    return Group(task_id=f"{TASKSET}/{claim.index}", experiences=exps, policy_version=0, explorer="sim", rank=i,
                 info=TaskRef(TASKSET, claim.epoch, claim.index).info())


def explorer(i: int, run: Path, args: Args, ahead: int, shards: int, stop, out) -> None:
    """One simulated explorer process (see the module docstring); puts its figures on `out`."""
    from rfthpc.sharedfs.fileops import write_json_atomic
    from rfthpc.store.writer import ChunkWriter
    from rfthpc.tasks.claims import ClaimSet
    from rfthpc.weights import published as weights

    shim = Shim(str(run), args.latency_ms / 1000)
    shim.install()
    rng = np.random.default_rng(i)
    waits: list = []
    holds: list = []
    claims = ClaimSet(run, TASKSET, num_tasks=10**7, shards=shards, home=i, lease_s=args.lease_s, lock=args.lock,
                      owner=f"sim/{i}", ahead=ahead)
    for t in claims._shards:
        t._lock = TimedLock(t._lock, waits, holds, t.shard)
    writer = ChunkWriter(run, "sim", i, args.groups_per_chunk, args.max_chunk_delay)
    done = threading.Event()
    version = [0]

    def heartbeat() -> None:
        while not done.wait(args.lease_s / 4):
            claims.heartbeat()
            weights.record_reader(run, "sim", i, version[0])
            write_json_atomic(run / "explorer_meta" / "sim" / f"{i}.json", {"rank": i, "time": time.time()})

    def follow() -> None:
        bell = weights.latest_doorbell(run)
        seen = bell.signature()
        while not done.wait(1.0):
            now = bell.signature()
            if now != seen:
                seen = now
                version[0] = weights.read_latest(run) or 0
                weights.record_reader(run, "sim", i, version[0])

    threads = [threading.Thread(target=heartbeat, daemon=True), threading.Thread(target=follow, daemon=True)]
    for t in threads:
        t.start()
    pending, committed_keys, claimed = [], [], 0
    start = time.monotonic()

    def complete_committed() -> None:
        n = len(pending) - writer.buffered
        if n > 0:
            batch = pending[:n]
            del pending[:n]
            # As the explorer does: settled in the next transaction (a claim, a heartbeat, close).
            committed_keys.extend(c.key for c in claims.complete(batch, defer=True))

    while not stop.is_set():
        got = claims.claim(args.claim_size, timeout_s=5, on_wait=writer.flush_if_due)
        claimed += len(got)
        time.sleep(float(rng.lognormal(np.log(args.gen_median_s), args.gen_sigma)))
        for c in got:
            writer.add(_group(i, c, rng))
            pending.append(c)
        writer.flush_if_due()
        complete_committed()
    writer.close()
    complete_committed()
    claims.close()
    done.set()
    out.put({"waits": waits, "holds": holds, "claimed": claimed, "committed": committed_keys, "chunks": writer.seq,
             "ops": dict(shim.ops), "seconds": time.monotonic() - start})


# ---- the trainer's reader -----------------------------------------------------------------------------


def trainer(run: Path, args: Args, expected, out) -> None:
    """The real StoreReader: takes batches until every committed group is taken (the total comes on
    `expected` once the explorers have stopped); checkpoints and collects garbage; publishes weights."""
    from rfthpc.store import StoreReader, collect_garbage
    from rfthpc.store.reader import StoreTimeout
    from rfthpc.store.schema import TaskRef
    from rfthpc.weights import published as weights

    shim = Shim(str(run), args.latency_ms / 1000)
    shim.install()
    reader = StoreReader(run, poll_s=0.5)
    taken: list[str] = []
    busy = 0.0
    total = None
    step = 0
    last_ckpt = last_publish = time.monotonic()
    deadline = None
    while total is None or len(taken) < total:
        if total is None and not expected.empty():
            total = expected.get()
            deadline = time.monotonic() + 300
        if deadline is not None and time.monotonic() > deadline:
            break
        waited = reader.waiter.stats.waited_s
        t = time.monotonic()
        try:
            groups = reader.take(args.read_batch if total is None else min(args.read_batch, max(1, total - len(taken))),
                                 current_version=step, timeout_s=1.0)
        except StoreTimeout:
            groups = []
        busy += (time.monotonic() - t) - (reader.waiter.stats.waited_s - waited)
        for g in groups:
            ref = TaskRef.of(g)
            taken.append(f"{ref.epoch}:{ref.index}")
        now = time.monotonic()
        if now - last_publish >= 2.0:
            step += 1
            weights.point_latest(run, step)
            last_publish = now
        if now - last_ckpt >= 5.0:
            state = reader.state()
            reader.mark_checkpointed(state)
            collect_garbage(run, state)
            last_ckpt = now
    out.put({"taken": taken, "busy": busy, "visible": list(reader.visible_latencies), "ops": dict(shim.ops)})


# ---- one simulation -----------------------------------------------------------------------------------


def simulate(n: int, args: Args, works: list[Path]) -> dict[str, float]:
    from rfthpc.config.settings import claim_batches, claim_shards

    runs = [work / f"run-{n}" for work in works]
    run = runs[0]
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("sim: true\n")
    (run / "weights").mkdir()
    ctx = mp.get_context("fork")
    stop, results, expected, trainer_out = ctx.Event(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    reader = ctx.Process(target=trainer, args=(run, args, expected, trainer_out))
    reader.start()
    ahead, shards = claim_batches(args.claim_batches, n), claim_shards(args.claim_shards, n)
    procs = [ctx.Process(target=explorer, args=(i, runs[i % len(runs)], args, ahead, shards, stop, results))
             for i in range(n)]
    start = time.monotonic()
    for p in procs:
        p.start()
    time.sleep(args.seconds)
    stop.set()
    ends = [results.get() for _ in procs]
    explore_s = time.monotonic() - start
    committed = [k for e in ends for k in e["committed"]]
    expected.put(len(committed))
    tr = trainer_out.get()
    wall = time.monotonic() - start
    for p in [*procs, reader]:
        p.join()
    waits = np.array([w for e in ends for w, _ in e["waits"]] or [0.0])
    # After the start-up herd (every array task claiming at once): waits that began once every
    # explorer had its first claims.
    settled = max((e["waits"][0][1] + e["waits"][0][0] for e in ends if e["waits"]), default=0.0)
    steady = np.array([w for e in ends for w, began in e["waits"] if began > settled] or [0.0])
    busy: Counter = Counter()
    for e in ends:
        for shard, held in e["holds"]:
            busy[shard] += held
    holds = np.array([h for e in ends for _, h in e["holds"]] or [0.0])
    visible = np.array(tr["visible"] or [0.0])
    counts = Counter(tr["taken"])
    ops = sum(sum(e["ops"].values()) for e in ends) + sum(tr["ops"].values())
    chunks = sum(e["chunks"] for e in ends)
    shutil.rmtree(run, ignore_errors=True)
    return {
        "n": n, "claims_per_s": sum(e["claimed"] for e in ends) / explore_s,
        "lock_wait_p50_s": float(np.percentile(waits, 50)), "lock_wait_p99_s": float(np.percentile(waits, 99)),
        "lock_wait_p99_steady_s": float(np.percentile(steady, 99)),
        "lock_busy": max(busy.values(), default=0.0) / explore_s, "lock_hold_p50_s": float(np.percentile(holds, 50)),
        "visible_p50_s": float(np.percentile(visible, 50)), "visible_p99_s": float(np.percentile(visible, 99)),
        "reader_groups_per_s": len(tr["taken"]) / max(tr["busy"], 1e-9), "metaops_per_s": ops / wall,
        "files_per_1000_groups": 1000 * chunks / max(1, len(committed)), "groups": len(committed),
        "lost": len(set(committed) - set(counts)), "twice": sum(c - 1 for c in counts.values() if c > 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the simulations and print the figures."""
    args = tyro.cli(Args, args=argv)
    import h5py  # noqa: F401 - imported before forking, shared by every simulated process

    import rfthpc.store  # noqa: F401

    works = [Path(w) for w in args.work] or [Path(tempfile.mkdtemp(prefix="rfthpc-sim-scale-"))]
    works[0].mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        print(f"{args.latency_ms:g} ms per metadata operation; batches of {args.claim_size} tasks, generation "
              f"lognormal(median {args.gen_median_s:g} s, sigma {args.gen_sigma:g}); {args.seconds:g} s per run; "
              f"lock {args.lock}; {len(works)} client(s) of the run directory", flush=True)
        header = ("n", "claims/s", "lock p50 s", "lock p99 s", "steady p99 s", "lock busy", "hold p50 s",
                  "visible p50 s", "visible p99 s", "reader groups/s",
                  "metaops/s", "files/1000 groups", "groups", "lost", "twice")
        print("  ".join(f"{h:>10}" for h in header), flush=True)
        for n in args.n:
            r = simulate(n, args, works)
            rows.append(r)
            print("  ".join(f"{v:>10.3g}" if isinstance(v, float) else f"{v:>10}" for v in r.values()), flush=True)
    finally:
        if not args.work:
            shutil.rmtree(works[0], ignore_errors=True)
    last = rows[-1]
    n = last["n"]
    print(f"FIGURES claims_per_s_{n}={last['claims_per_s']:.4g} lock_wait_p99_s_{n}={last['lock_wait_p99_s']:.4g} "
          f"lock_wait_p99_steady_s_{n}={last['lock_wait_p99_steady_s']:.4g} "
          f"visible_p99_s_{n}={last['visible_p99_s']:.4g} reader_groups_per_s_{n}={last['reader_groups_per_s']:.4g} "
          f"metaops_per_s_{n}={last['metaops_per_s']:.4g} lost={sum(r['lost'] for r in rows)} "
          f"twice={sum(r['twice'] for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
