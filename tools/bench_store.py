"""Benchmark the experience store against its limit (raw h5py) and Trinity-RFT's SQLite buffer.

usage: python tools/bench_store.py [--groups 1024] [--writers 8] [--responses 8] [--tokens 1024]
                                   [--groups-per-chunk 64] [--repeat 3] [--dir DIR]

All three run on the same data: `--groups` groups of `--responses` responses of `--tokens`
response tokens (plus a 256-token prompt), split over `--writers` writer processes, each of which
generates its share before a common start barrier so that only writing is timed. Writers are new
processes (spawned), as explorers are: a writer forked from this warm process would spend its
first chunks copying the parent's memory pages it touches, which no explorer does.

- store:  `--writers` processes write with ChunkWriter while a follower lists the store every
          50 ms as StoreReader does (commit -> visible latency); then a StoreReader takes every
          group in batches of 32 (read rate).
- raw:    one process writes the same arrays, concatenated, into one HDF5 file (each group's
          prompt once, as the store keeps it) and fsyncs it and its directory, as a store commit
          does: the most a single writer can do (the limit; nobody can read it until it is closed).
- sqlite: Trinity-RFT's default buffer: one table row per experience holding the serialised
          experience (pickle, as Trinity's Experience.serialize does), a transaction per group from
          `--writers` processes (WAL journal), polled every 50 ms for new ids (latency), then read
          back FIFO by id in batches of 32 groups.

Each backend runs `--repeat` times in turn; throughputs are the best run of each (the machine may
be shared), latencies are percentiles over all runs. "CPU ms/group" is the writers' CPU time (all
processes) per group, which machine load does not change much. Prints one table and, last, the line
`FIGURES write_vs_raw=… write_vs_sqlite=… read_groups_per_s=… visible_p50_s=… visible_p99_s=… files_per_1000_groups=…`.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import h5py

from rfthpc.sharedfs.fileops import fsync_dir
from rfthpc.store.layout import list_chunks
from rfthpc.store.reader import StoreReader
from rfthpc.store.schema import Group
from rfthpc.store.schema import StoredExperience as Experience
from rfthpc.store.writer import ChunkWriter

PROMPT_TOKENS = 256
READ_BATCH = 32
POLL_S = 0.05


def make_groups(writer: int, n: int, responses: int, tokens: int) -> list[Group]:
    """The `n` groups writer number `writer` writes (deterministic, the same for every backend)."""
    rng = np.random.default_rng(writer)
    groups = []
    for i in range(n):
        prompt = rng.integers(0, 150_000, PROMPT_TOKENS, dtype=np.int32)
        exps = [
            Experience(
                prompt_ids=prompt,
                response_ids=rng.integers(0, 150_000, tokens, dtype=np.int32),
                logprobs=-rng.random(tokens, dtype=np.float32),
                loss_mask=np.ones(tokens, np.int8),
                reward=float(rng.random()),
            )
            for _ in range(responses)
        ]
        groups.append(Group(task_id=f"w{writer}-{i}", experiences=exps, policy_version=0,
                            explorer="bench", rank=writer, group_id=f"w{writer}-{i}"))
    return groups


def split(total: int, parts: int) -> list[int]:
    """`total` groups split as evenly as possible over `parts` writers."""
    return [total // parts + (i < total % parts) for i in range(parts)]


# ---- the store ---------------------------------------------------------------------------------------


def store_writer(run: Path, w: int, n: int, args: argparse.Namespace, barrier, out) -> None:
    groups = make_groups(w, n, args.responses, args.tokens)
    # Chunks are cut by size here; max_chunk_delay_s bounds latency when groups arrive slowly.
    writer = ChunkWriter(run, "bench", w, groups_per_chunk=args.groups_per_chunk, max_chunk_delay_s=60.0)
    barrier.wait()
    cpu = time.process_time()
    for g in groups:
        writer.add(g)
    writer.close()
    out.put((time.time(), time.process_time() - cpu))


def store_follower(run: Path, total: int, out) -> None:
    """List the store as the reader does while the writers write; report commit -> visible latencies.

    Reading the groups is timed separately (the trainer reads on another node in a real run).
    """
    store = run / "experiences"
    seen: set[Path] = set()
    latencies: list[float] = []
    groups = 0
    while groups < total:
        now = time.time()
        for ref in list_chunks(store):
            if ref.path not in seen:
                seen.add(ref.path)
                latencies.append(now - ref.commit_ns / 1e9)
                groups += ref.n_groups
        time.sleep(POLL_S)
    out.put(latencies)


def bench_store(root: Path, args: argparse.Namespace) -> dict[str, float]:
    run = root / "store-run"
    run.mkdir()
    (run / "config.yaml").write_text("bench: true\n")
    ctx = mp.get_context("spawn")
    barrier, ends, lat = ctx.Barrier(args.writers + 1), ctx.Queue(), ctx.Queue()
    follower = ctx.Process(target=store_follower, args=(run, args.groups, lat))
    follower.start()
    procs = [ctx.Process(target=store_writer, args=(run, w, n, args, barrier, ends))
             for w, n in enumerate(split(args.groups, args.writers))]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.time()
    finished = [ends.get() for _ in procs]
    end, cpu = max(t for t, _ in finished), sum(c for _, c in finished)
    latencies = sorted(lat.get())
    for p in [*procs, follower]:
        p.join()
    files = sum(len(names) for _, _, names in os.walk(run / "experiences"))
    reader = StoreReader(root / "store-run", poll_s=0.01)
    t = time.perf_counter()
    got = 0
    while got < args.groups:
        got += len(reader.take(min(READ_BATCH, args.groups - got), current_version=0, timeout_s=10))
    read_s = time.perf_counter() - t
    return {"write_gps": args.groups / (end - start), "write_cpu_ms": 1000 * cpu / args.groups,
            "read_gps": args.groups / read_s, "latencies": latencies, "files_per_1000": 1000 * files / args.groups}


# ---- raw h5py: the limit -----------------------------------------------------------------------------


def bench_raw(root: Path, args: argparse.Namespace) -> dict[str, float]:
    groups = [g for w, n in enumerate(split(args.groups, args.writers))
              for g in make_groups(w, n, args.responses, args.tokens)]
    path = root / "raw.h5"
    t, cpu = time.perf_counter(), time.process_time()
    exps = [e for g in groups for e in g.experiences]
    with h5py.File(path, "w", locking=False) as f:
        # The same bytes as the store: a group's responses share one prompt, stored once.
        f["prompt"] = np.concatenate([g.experiences[0].prompt_ids for g in groups])
        f["response"] = np.concatenate([e.response_ids for e in exps])
        f["logprobs"] = np.concatenate([e.logprobs for e in exps])
        f["loss_mask"] = np.concatenate([e.loss_mask for e in exps])
        f["reward"] = np.array([e.reward for e in exps])
        f["response_len"] = np.array([len(e.response_ids) for e in exps])
    # The same durability as a store commit: the file, then its directory entry.
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    fsync_dir(root)
    write_s, cpu = time.perf_counter() - t, time.process_time() - cpu
    t = time.perf_counter()
    with h5py.File(path, "r", locking=False) as f:
        arrays = [f[k][()] for k in f]
    read_s = time.perf_counter() - t
    del arrays
    return {"write_gps": args.groups / write_s, "write_cpu_ms": 1000 * cpu / args.groups,
            "read_gps": args.groups / read_s, "latencies": [], "files_per_1000": 1000 / args.groups}


# ---- SQLite queue: Trinity-RFT's default buffer ------------------------------------------------------

_SCHEMA = ("CREATE TABLE IF NOT EXISTS experience (id INTEGER PRIMARY KEY AUTOINCREMENT, reward REAL, "
           "model_version INTEGER, committed_at REAL, experience_bytes BLOB)")


def _connect(db: Path) -> sqlite3.Connection:
    con = sqlite3.connect(db, timeout=600, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    return con


def sqlite_writer(db: Path, w: int, n: int, args: argparse.Namespace, barrier, out) -> None:
    groups = make_groups(w, n, args.responses, args.tokens)
    con = _connect(db)
    barrier.wait()
    cpu = time.process_time()
    for g in groups:
        rows = [(e.reward, g.policy_version, pickle.dumps(
            {"tokens": np.concatenate([e.prompt_ids, e.response_ids]), "logprobs": e.logprobs,
             "action_mask": e.loss_mask, "reward": e.reward, "prompt_length": len(e.prompt_ids)},
            protocol=pickle.HIGHEST_PROTOCOL)) for e in g.experiences]
        con.execute("BEGIN IMMEDIATE")
        now = time.time()
        con.executemany("INSERT INTO experience (reward, model_version, committed_at, experience_bytes) "
                        "VALUES (?, ?, ?, ?)", [(r, v, now, b) for r, v, b in rows])
        con.execute("COMMIT")
    con.close()
    out.put((time.time(), time.process_time() - cpu))


def sqlite_follower(db: Path, total_rows: int, out) -> None:
    con = _connect(db)
    offset, latencies = 0, []
    while offset < total_rows:
        rows = con.execute("SELECT id, committed_at FROM experience WHERE id > ? ORDER BY id LIMIT ?",
                           (offset, 1024)).fetchall()
        now = time.time()
        if not rows:
            time.sleep(POLL_S)
            continue
        latencies += [now - c for _, c in rows]
        offset = rows[-1][0]
    out.put(latencies)


def bench_sqlite(root: Path, args: argparse.Namespace) -> dict[str, float]:
    db = root / "buffer.db"
    _connect(db).execute(_SCHEMA).connection.close()
    ctx = mp.get_context("spawn")
    total_rows = args.groups * args.responses
    barrier, ends, lat = ctx.Barrier(args.writers + 1), ctx.Queue(), ctx.Queue()
    follower = ctx.Process(target=sqlite_follower, args=(db, total_rows, lat))
    follower.start()
    procs = [ctx.Process(target=sqlite_writer, args=(db, w, n, args, barrier, ends))
             for w, n in enumerate(split(args.groups, args.writers))]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.time()
    finished = [ends.get() for _ in procs]
    end, cpu = max(t for t, _ in finished), sum(c for _, c in finished)
    latencies = sorted(lat.get())
    files = len([n for n in os.listdir(root) if n.startswith(db.name)])
    for p in [*procs, follower]:
        p.join()
    con = _connect(db)
    t = time.perf_counter()
    offset = read = 0
    batch_rows = READ_BATCH * args.responses
    while read < total_rows:
        rows = con.execute("SELECT id, experience_bytes FROM experience WHERE id > ? ORDER BY id LIMIT ?",
                           (offset, batch_rows)).fetchall()
        _ = [pickle.loads(b) for _, b in rows]
        offset, read = rows[-1][0], read + len(rows)
    read_s = time.perf_counter() - t
    con.close()
    return {"write_gps": args.groups / (end - start), "write_cpu_ms": 1000 * cpu / args.groups,
            "read_gps": args.groups / read_s, "latencies": latencies, "files_per_1000": 1000 * files / args.groups}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=1024)
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--responses", type=int, default=8)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--groups-per-chunk", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3, help="runs per backend; the best throughput counts")
    p.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    args = p.parse_args()
    mb = args.groups * args.responses * (args.tokens * 9 + PROMPT_TOKENS * 4) / 1e6
    print(f"{args.groups} groups x {args.responses} responses x {args.tokens} tokens (~{mb:.0f} MB), "
          f"{args.writers} writers, {args.groups_per_chunk} groups per chunk")
    backends = {"store": bench_store, "raw h5py": bench_raw, "sqlite queue": bench_sqlite}
    runs: dict[str, list[dict]] = {name: [] for name in backends}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for k in range(args.repeat):
            for name, fn in backends.items():
                root = Path(tmp) / f"{name.replace(' ', '-')}-{k}"
                root.mkdir()
                # Flush what the previous run left (dirty pages, freed blocks to discard), so that no
                # backend pays for another's writes at its fsyncs.
                os.sync()
                runs[name].append(fn(root, args))
                shutil.rmtree(root)
    results = {}
    for name, rs in runs.items():
        latencies = [x for r in rs for x in r["latencies"]]
        results[name] = {
            "write_gps": max(r["write_gps"] for r in rs),
            "write_cpu_ms": min(r["write_cpu_ms"] for r in rs),
            "read_gps": max(r["read_gps"] for r in rs),
            "p50": float(np.percentile(latencies, 50)) if latencies else float("nan"),
            "p99": float(np.percentile(latencies, 99)) if latencies else float("nan"),
            "files_per_1000": max(r["files_per_1000"] for r in rs),
        }
    print(f"{'backend':<14}{'write groups/s':>16}{'MB/s':>9}{'CPU ms/group':>14}{'read groups/s':>15}"
          f"{'visible p50 s':>15}{'p99 s':>9}{'files/1000 groups':>19}")
    for name, r in results.items():
        print(f"{name:<14}{r['write_gps']:>16.1f}{r['write_gps'] * mb / args.groups:>9.1f}{r['write_cpu_ms']:>14.3f}"
              f"{r['read_gps']:>15.1f}{r['p50']:>15.3f}{r['p99']:>9.3f}{r['files_per_1000']:>19.1f}")
    s = results["store"]
    print(f"FIGURES write_vs_raw={s['write_gps'] / results['raw h5py']['write_gps']:.2f} "
          f"write_vs_sqlite={s['write_gps'] / results['sqlite queue']['write_gps']:.2f} "
          f"read_groups_per_s={s['read_gps']:.1f} visible_p50_s={s['p50']:.3f} visible_p99_s={s['p99']:.3f} "
          f"files_per_1000_groups={s['files_per_1000']:.1f}")


if __name__ == "__main__":
    main()
