"""Ten writer processes and one reader, with random SIGKILLs: every committed group read exactly once.

The store is on the local cluster's shared filesystem and the processes run on different nodes, so
through different clients of it (tests/conftest.py): writers of explorer `ea` on n1, of `eb` on n3,
the reader on n2.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rfthpc.sharedfs.fileops import is_temporary
from rfthpc.store.chunks import read_chunk
from rfthpc.store.layout import list_chunks
from tests.conftest import on_node

PROCS = Path(__file__).with_name("procs.py")
REPO = Path(__file__).parents[2]
SLOTS = [("ea", r) for r in range(5)] + [("eb", r) for r in range(5)]
GROUPS_PER_PROCESS = 48
GROUPS_PER_CHUNK = 8
NODE_OF = {"ea": "n1", "eb": "n3", "reader": "n2"}
TMP_CHUNK = re.compile(r"^\.tmp-c\d+-[0-9a-f]+-(?P<seq>\d+)\.h5\..+-(?P<pid>\d+)-[0-9a-f]{8}$")


def _start(node: str, *args: str) -> subprocess.Popen:
    """procs.py with `args` on `node` (its pid is the Python process's: nsenter execs it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(on_node(node, [sys.executable, str(PROCS), *args], cwd=REPO), env=env,
                            stderr=subprocess.PIPE)


def _kill(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGKILL)
    p.wait()


def _listing(folder: Path) -> list[str]:
    """The names in `folder` as this client sees them now; [] while it does not see the folder (a writer on
    another node creates it: GlusterFS may find the name before it can list it)."""
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_every_committed_group_is_read_exactly_once_under_sigkills(node_clients: dict[str, int], shared_dir: Path,
                                                                    tmp_path: Path) -> None:
    run = shared_dir / "run"
    run.mkdir()
    (run / "config.yaml").write_text("mode: both\n")
    log, ckpt, done, acks = tmp_path / "reader.jsonl", tmp_path / "ckpt.json", tmp_path / "done", tmp_path / "acks"
    acks.mkdir()
    rng = random.Random(1234)

    def start_writer(slot: int) -> subprocess.Popen:
        explorer, rank = SLOTS[slot]
        return _start(NODE_OF[explorer], "writer", str(run), explorer, str(rank), str(GROUPS_PER_PROCESS),
                      str(GROUPS_PER_CHUNK),
                      str(acks / f"{explorer}-{rank}.jsonl"))

    writers = {slot: start_writer(slot) for slot in range(len(SLOTS))}
    reader = _start(NODE_OF["reader"], "reader", str(run), str(log), str(ckpt), str(done), "5")
    try:
        random_kills = mid_chunk_kills = reader_kills = 0
        # Kills are scheduled by progress (chunks committed so far), not by the clock: on a quiet
        # machine the writers may finish in a few seconds, on a loaded one they take minutes. Every
        # writer commits GROUPS_PER_PROCESS / GROUPS_PER_CHUNK = 6 chunks, so all scheduled kills fall
        # before the 60th chunk, while writers are still running.
        random_kill_at = sorted(rng.randint(3, 40) for _ in range(8))
        reader_kill_at = [12, 30]
        deadline = time.monotonic() + 400
        while (writers or reader_kill_at) and time.monotonic() < deadline:
            for slot, p in list(writers.items()):
                if p.poll() is not None:
                    assert p.returncode == 0, p.stderr.read().decode()
                    del writers[slot]
            running = {p.pid: slot for slot, p in writers.items()}
            names = [n for d in (run / "experiences" / "ea", run / "experiences" / "eb") for n in _listing(d)]
            chunks = sum(1 for n in names if n.endswith(".h5"))
            # Kill a writer caught between creating its temporary chunk and publishing it, after
            # it committed its first chunk (so a dead writer's committed chunks are read too).
            if mid_chunk_kills < 6:
                for name in names:
                    m = TMP_CHUNK.match(name)
                    pid = int(m["pid"]) if m and int(m["seq"]) > 0 else -1
                    if pid in running and writers[running[pid]].poll() is None:
                        slot = running.pop(pid)
                        _kill(writers[slot])
                        writers[slot] = start_writer(slot)
                        mid_chunk_kills += 1
                        break
            if random_kill_at and writers and chunks >= random_kill_at[0]:
                random_kill_at.pop(0)
                slot = rng.choice(sorted(writers))
                _kill(writers[slot])
                writers[slot] = start_writer(slot)
                random_kills += 1
            if reader_kill_at and (chunks >= reader_kill_at[0] or not writers):
                reader_kill_at.pop(0)
                _kill(reader)
                reader_kills += 1
                reader = _start(NODE_OF["reader"], "reader", str(run), str(log), str(ckpt), str(done), "5")
            time.sleep(0.002)
        assert not writers, "writers did not finish in time"
        done.touch()
        reader.wait(timeout=120)
        assert reader.returncode == 0, reader.stderr.read().decode()
    finally:
        for p in [*writers.values(), reader]:
            if p.poll() is None:
                _kill(p)

    committed: list[str] = []
    for ref in list_chunks(run / "experiences"):
        assert not ref.quarantined
        committed += [g.group_id for g in read_chunk(ref.path)[1]]
    assert len(committed) == len(set(committed))
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    consumed = [gid for line in lines for gid in line["ids"]]
    assert [gid for line in lines for gid in line["bad"]] == []
    assert len(consumed) == len(set(consumed)), "a group was read twice"
    assert set(consumed) == set(committed), "a committed group was lost, or an uncommitted one read"
    acked = {gid for f in acks.iterdir() for line in f.read_text().splitlines() for gid in json.loads(line)}
    assert acked <= set(committed)
    leftovers = [n for d in ("ea", "eb") for n in os.listdir(run / "experiences" / d) if is_temporary(n)]
    print(f"{len(committed)} groups committed and read once; kills: {random_kills} random, "
          f"{mid_chunk_kills} mid-chunk ({len(leftovers)} partial chunks left), {reader_kills} reader")
    assert mid_chunk_kills >= 1 and leftovers, "no writer was killed mid-chunk"
    assert reader_kills == 2 and random_kills == 8
    # Killed writers committed some chunks before dying: those are read too.
    assert len(committed) > len(SLOTS) * GROUPS_PER_PROCESS
