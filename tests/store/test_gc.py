"""Garbage collection removes consumed chunks and dead writers' temporary files, nothing still needed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from rfthpc.sharedfs.fileops import TMP_PREFIX
from rfthpc.store.gc import collect_garbage
from rfthpc.store.layout import QUARANTINE_DIR, list_chunks
from rfthpc.store.reader import StoreReader
from rfthpc.store.writer import ChunkWriter

from .groups import make_group


def _chunks(run_dir: Path) -> int:
    return len([r for r in list_chunks(run_dir / "experiences") if not r.quarantined])


def test_only_chunks_consumed_at_the_checkpoint_are_deleted(run_dir: Path) -> None:
    w = ChunkWriter(run_dir, "ex", 0, groups_per_chunk=2)
    for i in range(8):
        w.add(make_group(f"t{i}"))
    reader = StoreReader(run_dir)
    assert collect_garbage(run_dir)["chunks"] == 0  # no checkpoint recorded yet
    reader.take(3, 0, timeout_s=1)
    checkpointed = reader.state()  # chunk 0 consumed, chunk 1 half consumed
    reader.mark_checkpointed(checkpointed)
    reader.take(3, 0, timeout_s=1)  # the live trainer is ahead of its checkpoint
    removed = collect_garbage(run_dir)
    assert removed["chunks"] == 1 and removed["chunk_bytes"] > 0
    assert _chunks(run_dir) == 3
    # A trainer resumed from the checkpoint still finds everything it has not consumed.
    resumed = StoreReader(run_dir)
    resumed.load_state(checkpointed)
    assert [g.task_id for g in resumed.take(5, 0, timeout_s=1)] == [f"t{i}" for i in range(3, 8)]
    assert collect_garbage(run_dir, consumed_state=resumed.state())["chunks"] == 3


def test_temporary_files_of_dead_or_long_gone_writers_are_deleted(run_dir: Path) -> None:
    ChunkWriter(run_dir, "ex", 0).close()
    d = run_dir / "experiences" / "ex"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    host = socket.gethostname()
    dead_tmp = d / f"{TMP_PREFIX}c00000-0123456789abcdef-00000003.h5.{host}-{dead.stdout.strip()}-0badc0de"
    live_tmp = d / f"{TMP_PREFIX}c00001-0123456789abcdef-00000000.h5.{host}-{os.getpid()}-0badc0de"
    old_tmp = d / f"{TMP_PREFIX}c00002-0123456789abcdef-00000000.h5.other-node.cluster-77-0badc0de"
    young_remote = d / f"{TMP_PREFIX}c00003-0123456789abcdef-00000000.h5.other-node.cluster-78-0badc0de"
    for p in (dead_tmp, live_tmp, old_tmp, young_remote):
        p.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(old_tmp, (two_hours_ago, two_hours_ago))
    assert collect_garbage(run_dir)["tmp_files"] == 2
    assert sorted(p.name for p in d.iterdir()) == sorted([live_tmp.name, young_remote.name])


def test_quarantined_chunks_are_kept(run_dir: Path) -> None:
    w = ChunkWriter(run_dir, "ex", 0, groups_per_chunk=1)
    for i in range(2):
        w.add(make_group(f"t{i}"))
    first = min(r.path for r in list_chunks(run_dir / "experiences"))
    first.write_bytes(b"garbage")
    reader = StoreReader(run_dir)
    reader.take(1, 0, timeout_s=1)
    reader.mark_checkpointed(reader.state())
    assert collect_garbage(run_dir)["chunks"] == 1
    assert (run_dir / "experiences" / QUARANTINE_DIR / "ex" / first.name).exists()


def test_keeping_chunks_still_deletes_dead_writers_temporary_files(run_dir: Path) -> None:
    w = ChunkWriter(run_dir, "ex", 0, groups_per_chunk=1)
    for i in range(2):
        w.add(make_group(f"t{i}"))
    old_tmp = run_dir / "experiences" / "ex" / f"{TMP_PREFIX}c00009-0123456789abcdef-00000000.h5.elsewhere-7-0badc0de"
    old_tmp.write_bytes(b"partial")
    os.utime(old_tmp, (time.time() - 7200, time.time() - 7200))
    reader = StoreReader(run_dir)
    reader.take(2, 0, timeout_s=1)
    reader.mark_checkpointed(reader.state())
    assert collect_garbage(run_dir, keep_chunks=True) == {"chunks": 0, "chunk_bytes": 0, "tmp_files": 1}
    assert _chunks(run_dir) == 2


def test_kept_chunks_export_the_whole_history(run_dir: Path, tmp_path: Path) -> None:
    """With the consumed chunks kept, `rfthpc store export` writes every group as a JSON line, with
    what the trainer's checkpoint says of it (taken or pending), its tokens and rewards."""
    import json

    with ChunkWriter(run_dir, "ex", 0, groups_per_chunk=2) as w:
        for i in range(5):
            w.add(make_group(f"t{i}"))
    out = tmp_path / "history.jsonl"
    cmd = [sys.executable, "-m", "rfthpc", "store", "export", str(run_dir), "--out", str(out)]
    before = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert before.returncode == 0 and "exported 5 unknown" in before.stderr, before.stderr
    reader = StoreReader(run_dir)
    reader.take(3, 0, timeout_s=1)
    reader.mark_checkpointed(reader.state())
    assert collect_garbage(run_dir, keep_chunks=True)["chunks"] == 0
    after = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert after.returncode == 0 and "exported 2 pending, 3 taken" in after.stderr, after.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["status"]) for r in rows] == [("t0", "taken"), ("t1", "taken"), ("t2", "taken"),
                                                          ("t3", "pending"), ("t4", "pending")]
    first = rows[0]["experiences"][0]
    assert isinstance(first["response_ids"], list) and isinstance(first["reward"], float)
    missing = subprocess.run([*cmd[:4], "export", str(tmp_path / "nothing")], capture_output=True, text=True,
                             timeout=120, check=False)
    assert missing.returncode == 2, missing.stderr
