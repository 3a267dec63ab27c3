"""Four writer processes and a replay reader killed with SIGKILL, also while it drains its replay buffer:
every committed group is read exactly its use-count limit times in the history the checkpoints kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

PROCS = Path(__file__).with_name("procs.py")
REPO = Path(__file__).parents[2]
SLOTS = [("ea", 0), ("ea", 1), ("eb", 0), ("eb", 1)]
GROUPS_PER_PROCESS = 40
GROUPS_PER_CHUNK = 8
BATCH = 5
USE_COUNT_LIMIT = 3


def _start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(PROCS), *args], env=env, stderr=subprocess.PIPE)


def _kill(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGKILL)
    p.wait()


def _names(d: Path) -> list[str]:
    return os.listdir(d) if d.is_dir() else []


def _lines(log: Path) -> int:
    try:
        return log.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.slow
def test_replayed_groups_are_read_at_most_their_limit_and_none_is_lost_under_sigkills(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("mode: both\n")
    log, ckpt, done, acks = tmp_path / "reader.jsonl", tmp_path / "ckpt.json", tmp_path / "done", tmp_path / "acks"
    acks.mkdir()

    def start_reader() -> subprocess.Popen:
        return _start("replay_reader", str(run), str(log), str(ckpt), str(done), str(BATCH), str(USE_COUNT_LIMIT))

    writers = [_start("writer", str(run), e, str(r), str(GROUPS_PER_PROCESS), str(GROUPS_PER_CHUNK),
                      str(acks / f"{e}-{r}.jsonl")) for e, r in SLOTS]
    reader = start_reader()
    # Each group is read 3 times, 5 per batch: 96 batches in all. The first kill falls while the
    # writers still commit (by chunks committed); the others by batches logged, most of them after
    # the writers are done, while the reader lives on its replay buffer alone.
    kill_at_chunks = 5
    kill_at_lines = [20, 45, 60, 75]
    kills = 0
    kills_after_done = 0
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if not done.exists() and all(p.poll() is not None for p in writers):
                for p in writers:
                    assert p.returncode == 0, p.stderr.read().decode()
                done.touch()
            chunks = sum(n.endswith(".h5") for d in ("ea", "eb") for n in _names(run / "experiences" / d))
            lines = _lines(log)
            due = (kill_at_chunks and chunks >= kill_at_chunks) or (kill_at_lines and lines >= kill_at_lines[0])
            if due and reader.poll() is None:
                if kill_at_chunks and chunks >= kill_at_chunks:
                    kill_at_chunks = 0
                else:
                    kill_at_lines.pop(0)
                _kill(reader)
                kills += 1
                kills_after_done += done.exists()
                reader = start_reader()
            if reader.poll() is not None:
                break
            time.sleep(0.005)
        reader.wait(timeout=60)
        assert reader.returncode == 0, reader.stderr.read().decode()
    finally:
        for p in [*writers, reader]:
            if p.poll() is None:
                _kill(p)

    committed = {gid for f in acks.iterdir() for line in f.read_text().splitlines() for gid in json.loads(line)}
    assert len(committed) == len(SLOTS) * GROUPS_PER_PROCESS
    batches = [json.loads(x) for x in log.read_text().splitlines()]
    assert [gid for b in batches for gid in b["bad"]] == []
    assert all(len(set(b["ids"])) == len(b["ids"]) for b in batches), "a group twice in one batch"
    reads = Counter(gid for b in batches for gid in b["ids"])
    assert set(reads) == committed, "a committed group was lost, or an uncommitted one read"
    over = {gid: n for gid, n in reads.items() if n > USE_COUNT_LIMIT}
    assert not over, f"read more often than the limit: {over}"
    assert set(reads.values()) == {USE_COUNT_LIMIT}, "a group left the replay buffer before its last read"
    state = json.loads(ckpt.read_text())["state"]
    assert state["counters"]["consumed"] == len(committed)
    assert state["counters"]["reused"] == (USE_COUNT_LIMIT - 1) * len(committed)
    assert "replay" not in state, "groups were left in the replay buffer"
    # The checkpoints let the store be collected as the reader went; what is left is only what the
    # last checkpoints still pointed into.
    print(f"{len(committed)} groups read {USE_COUNT_LIMIT} times each in {len(batches)} batches; {kills} reader "
          f"kills ({kills_after_done} after the writers were done)")
    assert kills == 5 and kills_after_done >= 2
