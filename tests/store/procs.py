"""Writer and reader processes for the store's multi-process tests (run as scripts, killed at random).

    python tests/store/procs.py writer RUN_DIR EXPLORER RANK N_GROUPS GROUPS_PER_CHUNK ACK_FILE
    python tests/store/procs.py reader RUN_DIR LOG_FILE CKPT_FILE DONE_FLAG BATCH
    python tests/store/procs.py replay_reader RUN_DIR LOG_FILE CKPT_FILE DONE_FLAG BATCH USE_COUNT_LIMIT
    python tests/store/procs.py claimer RUN_DIR OWNER N_TASKS EPOCHS LEASE_S LOCK_KIND OUT_FILE

The writer derives every group's content from its id, and appends the ids of each chunk it has
committed to ACK_FILE. The reader appends one JSON line per batch it takes (ids, and the ids whose
content does not match their id) and saves a checkpoint (its state_dict and the number of log lines
it covers) every third batch; restarted, it truncates the log to its checkpoint, as a trainer
resumed from a checkpoint forgets the steps after it. Once DONE_FLAG exists and nothing more
arrives, it drains the store and exits. The replay reader does the same through a replay buffer
that lets it read each group USE_COUNT_LIMIT times (noisy priorities, no cooldown), its version
one higher per batch; after each checkpoint it lets the store be garbage-collected, as the trainer
does. The claimer claims tasks three at a time from a shuffled
taskset until it is finished, appending its name and the (epoch, index) pairs `complete` accepted
to OUT_FILE.
"""

from __future__ import annotations

import json
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from rfthpc.algorithms.replay import ReplayPolicy
from rfthpc.sharedfs.fileops import append_line, read_json, write_json_atomic, write_text_atomic
from rfthpc.store.gc import collect_garbage
from rfthpc.store.reader import StoreReader, StoreTimeout
from rfthpc.store.reader_files import ReaderState
from rfthpc.store.schema import Group
from rfthpc.store.schema import StoredExperience as Experience
from rfthpc.store.writer import ChunkWriter
from rfthpc.tasks.claims import ClaimSet

RESPONSES = 4
TOKENS = 256


def make_group(group_id: str, explorer: str, rank: int) -> Group:
    """A group whose every array and reward is a function of its id."""
    rng = np.random.default_rng(zlib.crc32(group_id.encode()))
    prompt = rng.integers(0, 50_000, 64)
    experiences = [
        Experience(
            prompt_ids=prompt,
            response_ids=rng.integers(0, 50_000, TOKENS),
            logprobs=-rng.random(TOKENS, dtype=np.float32),
            loss_mask=rng.integers(0, 2, TOKENS),
            reward=float(rng.random()),
            info={"k": i},
        )
        for i in range(RESPONSES)
    ]
    return Group(task_id=group_id.rsplit("/", 1)[-1], experiences=experiences, policy_version=0,
                 explorer=explorer, rank=rank, group_id=group_id)


def matches(g: Group) -> bool:
    """True if a group read back equals the one its id describes."""
    want = make_group(g.group_id, g.explorer, g.rank)
    return len(g.experiences) == RESPONSES and all(
        np.array_equal(a.prompt_ids, b.prompt_ids)
        and np.array_equal(a.response_ids, b.response_ids)
        and np.array_equal(a.logprobs, b.logprobs)
        and np.array_equal(a.loss_mask, b.loss_mask)
        and a.reward == b.reward
        and a.info == b.info
        for a, b in zip(g.experiences, want.experiences)
    )


def writer(run_dir: str, explorer: str, rank: str, n_groups: str, per_chunk: str, ack_file: str) -> None:
    w = ChunkWriter(Path(run_dir), explorer, int(rank), groups_per_chunk=int(per_chunk), max_chunk_delay_s=60)
    unacked: list[str] = []
    for i in range(int(n_groups)):
        gid = f"{explorer}/{rank}/{os.getpid()}/{i}"
        seq = w.seq
        w.add(make_group(gid, explorer, int(rank)))
        unacked.append(gid)
        if w.seq != seq:
            append_line(Path(ack_file), json.dumps(unacked))
            unacked = []
    w.close()
    if unacked:
        append_line(Path(ack_file), json.dumps(unacked))


def reader(run_dir: str, log_file: str, ckpt_file: str, done_flag: str, batch: str) -> None:
    _consume(StoreReader(Path(run_dir), poll_s=0.02), Path(log_file), Path(ckpt_file), Path(done_flag), int(batch))


def replay_reader(run_dir: str, log_file: str, ckpt_file: str, done_flag: str, batch: str,
                  use_count_limit: str) -> None:
    policy = ReplayPolicy(reuse_cooldown_s=0.0, priority_fn="decay_limit_randomization",
                          priority_fn_args={"decay": 1.0, "use_count_limit": int(use_count_limit), "sigma": 0.5})
    r = StoreReader(Path(run_dir), poll_s=0.02, replay=policy)
    _consume(r, Path(log_file), Path(ckpt_file), Path(done_flag), int(batch), replay=True)


def _consume(r: StoreReader, log: Path, ckpt: Path, done_flag: Path, size: int, replay: bool = False) -> None:
    saved = read_json(ckpt)
    lines = log.read_text().splitlines(keepends=True) if log.exists() else []
    if saved is not None:
        r.load_state(ReaderState.from_dict(saved["state"]))
        lines = lines[: saved["n_lines"]]
    else:
        lines = []
    write_text_atomic(log, "".join(lines))
    n_lines, takes = len(lines), 0
    while True:
        try:
            # With replay the version moves on with every batch, as a trainer's does with every step.
            groups = r.take(size, current_version=n_lines if replay else 0, timeout_s=1.0)
        except StoreTimeout:
            if not done_flag.exists():
                continue
            if size == 1:
                break
            size = 1  # drain the tail, which may be smaller than a batch
            continue
        bad = [g.group_id for g in groups if not matches(g)]
        append_line(log, json.dumps({"ids": [g.group_id for g in groups], "bad": bad}))
        n_lines += 1
        takes += 1
        if replay:
            time.sleep(0.01)  # a training step: the test has time to kill the reader while it drains the buffer
        if takes % 3 == 0:
            write_json_atomic(ckpt, {"state": r.state().to_dict(), "n_lines": n_lines})
            if replay:
                r.mark_checkpointed(r.state())
                collect_garbage(r.store.parent)
    write_json_atomic(ckpt, {"state": r.state().to_dict(), "n_lines": n_lines})


def claimer(run_dir: str, owner: str, n_tasks: str, epochs: str, lease_s: str, lock: str, ahead: str, shards: str,
            out_file: str) -> None:
    claims = ClaimSet(Path(run_dir), "ts", int(n_tasks), shards=int(shards), home=int(owner.rsplit("/", 1)[1]),
                      total_epochs=int(epochs), selector="shuffle", seed=7, lease_s=float(lease_s), lock=lock,
                      owner=owner, ahead=int(ahead))
    while batch := claims.claim(3, poll_s=0.05):
        time.sleep(0.3)  # exploring
        done = claims.complete(batch)
        append_line(Path(out_file), json.dumps({"owner": owner, "done": [[c.epoch, c.index] for c in done]}))


if __name__ == "__main__":
    procs = {"writer": writer, "reader": reader, "replay_reader": replay_reader, "claimer": claimer}
    procs[sys.argv[1]](*sys.argv[2:])
