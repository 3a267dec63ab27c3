"""StoreReader: commit order, exactly once across restarts, staleness, eval, timeouts, bad chunks."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path

import pytest

from rfthpc.errors import UserError
from rfthpc.sharedfs import fileops as fsutil
from rfthpc.store.layout import QUARANTINE_DIR, list_chunks, open_store
from rfthpc.store.reader import StoreReader, StoreTimeout
from rfthpc.store.reader_files import Cursor, ReaderState, read_checkpointed, write_checkpointed
from rfthpc.store.writer import ChunkWriter
from rfthpc.tasks.claims import TaskClaims

from .groups import make_group


def _write(run_dir: Path, explorer: str, rank: int, tasks: list[str], per_chunk: int, **kw: int) -> ChunkWriter:
    w = ChunkWriter(run_dir, explorer, rank, groups_per_chunk=per_chunk)
    for t in tasks:
        w.add(make_group(t, explorer=explorer, rank=rank, **kw))
    w.flush()
    return w


def _ids(groups: list) -> list[str]:
    return [g.task_id for g in groups]


def test_groups_come_in_commit_order_across_explorers(run_dir: Path) -> None:
    a = ChunkWriter(run_dir, "ea", 0, groups_per_chunk=2)
    b = ChunkWriter(run_dir, "eb", 3, groups_per_chunk=2)
    order = []
    for i in range(3):
        for w in (b, a):
            for j in range(2):
                task = f"{w.explorer}-{i}-{j}"
                w.add(make_group(task, explorer=w.explorer, rank=w.rank))
                order.append(task)
    reader = StoreReader(run_dir)
    assert _ids(reader.take(12, current_version=0, timeout_s=1)) == order


def test_a_damaged_reader_state_is_an_error_and_a_damaged_checkpointed_file_reads_as_none(run_dir: Path) -> None:
    with pytest.raises(ValueError, match="malformed experience-store reader state"):
        ReaderState.from_dict({"format": 1, "cursor": {"ex/0-ab": [3]}, "counters": {}, "staleness_hist": {},
                               "version_hist": {}})
    with pytest.raises(ValueError, match="not an experience-store reader state"):
        ReaderState.from_dict({"format": 2})
    store = open_store(run_dir, create=True)
    assert read_checkpointed(store) is None
    state = ReaderState(cursor={"ex/0-ab": Cursor(2, 1)}, counters={"consumed": 9})
    write_checkpointed(store, state)
    assert read_checkpointed(store) == ReaderState(cursor={"ex/0-ab": Cursor(2, 1)},
                                                   counters={"consumed": 9, "dropped_stale": 0,
                                                             "dropped_duplicate": 0, "skipped_eval": 0,
                                                             "quarantined_chunks": 0, "quarantined_groups": 0,
                                                             "evicted": 0, "reused": 0})
    assert [Cursor(2, 1).taken(seq, 4) for seq in (1, 2, 3)] == [4, 1, 0]
    (store / "_reader" / "checkpointed.json").write_text('{"format": 1, "cursor": ')
    assert read_checkpointed(store) is None


def test_state_resumes_exactly_where_the_checkpoint_was(run_dir: Path) -> None:
    _write(run_dir, "ex", 0, [f"t{i}" for i in range(10)], per_chunk=4)
    reader = StoreReader(run_dir)
    assert _ids(reader.take(3, 0, timeout_s=1)) == ["t0", "t1", "t2"]
    # Through its JSON form, as a checkpoint keeps it.
    saved = ReaderState.from_dict(json.loads(json.dumps(reader.state().to_dict())))
    assert saved == reader.state() and saved.at("nowhere") == (0, 0)
    assert _ids(reader.take(3, 0, timeout_s=1)) == ["t3", "t4", "t5"]
    resumed = StoreReader(run_dir)
    resumed.load_state(saved)
    assert _ids(resumed.take(7, 0, timeout_s=1)) == [f"t{i}" for i in range(3, 10)]
    with pytest.raises(StoreTimeout):
        resumed.take(1, 0, timeout_s=0.2)
    assert resumed.metrics()["store/consumed"] == 10


def test_stale_groups_are_dropped_and_counted(run_dir: Path) -> None:
    w = ChunkWriter(run_dir, "ex", 0, groups_per_chunk=100)
    for v in range(6):
        w.add(make_group(f"v{v}", version=v))
    w.flush()
    reader = StoreReader(run_dir, max_staleness=2)
    # at trainer version 5, versions 0-2 are more than 2 versions old
    assert _ids(reader.take(3, current_version=5, timeout_s=1)) == ["v3", "v4", "v5"]
    m = reader.metrics()
    assert m["store/dropped_stale"] == 3 and m["store/consumed"] == 3
    assert m["store/batch_staleness_max"] == 2 and m["store/batch_staleness_mean"] == 1


def test_eval_groups_are_never_returned(run_dir: Path) -> None:
    w = ChunkWriter(run_dir, "ex", 0, groups_per_chunk=100)
    for i in range(4):
        w.add(make_group(f"t{i}", is_eval=i % 2 == 0))
    w.flush()
    reader = StoreReader(run_dir)
    assert _ids(reader.take(2, 0, timeout_s=1)) == ["t1", "t3"]
    assert reader.metrics()["store/skipped_eval"] == 2


def test_timeout_consumes_nothing(run_dir: Path) -> None:
    w = ChunkWriter(run_dir, "ex", 0, groups_per_chunk=1)
    for i in range(3):
        w.add(make_group(f"t{i}", version=0))
    reader = StoreReader(run_dir, max_staleness=0)
    with pytest.raises(StoreTimeout, match="only 3 of 5"):
        reader.take(5, current_version=0, timeout_s=0.3)
    assert reader.metrics()["store/consumed"] == 0 and reader.metrics()["store/pending"] == 3
    for i in range(3, 5):
        w.add(make_group(f"t{i}"))
    assert _ids(reader.take(5, 0, timeout_s=1)) == [f"t{i}" for i in range(5)]


def test_take_waits_for_a_commit_and_sees_it_quickly(run_dir: Path) -> None:
    reader = StoreReader(run_dir, poll_s=0.02)
    with pytest.raises(StoreTimeout):
        reader.take(1, 0, timeout_s=0.05)
    _write(run_dir, "ex", 0, ["late"], per_chunk=1)
    t = time.monotonic()
    assert _ids(reader.take(1, 0, timeout_s=2)) == ["late"]
    assert time.monotonic() - t < 0.5
    assert 0 <= reader.metrics()["store/visible_latency_p50_s"] < 0.5


def test_temporary_chunks_are_never_read(run_dir: Path) -> None:
    _write(run_dir, "ex", 0, ["a", "b"], per_chunk=2)
    committed = list_chunks(run_dir / "experiences")[0].path
    # A copy of a complete chunk under a temporary name, as a writer killed before its rename leaves it.
    tmp = committed.with_name(fsutil.TMP_PREFIX + committed.name + ".host-1-abcdef01")
    tmp.write_bytes(committed.read_bytes())
    reader = StoreReader(run_dir)
    assert _ids(reader.take(2, 0, timeout_s=1)) == ["a", "b"]
    with pytest.raises(StoreTimeout):
        reader.take(1, 0, timeout_s=0.2)


def test_corrupt_chunk_is_quarantined_and_the_rest_keeps_working(
    run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write(run_dir, "ex", 0, [f"t{i}" for i in range(6)], per_chunk=2)
    _write(run_dir, "other", 1, ["o0"], per_chunk=1)
    bad = sorted(r.path for r in list_chunks(run_dir / "experiences") if r.explorer == "ex")[1]
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    reader = StoreReader(run_dir)
    before = reader.state()
    with caplog.at_level(logging.ERROR):
        got = _ids(reader.take(5, 0, timeout_s=1))
    assert sorted(got) == ["o0", "t0", "t1", "t4", "t5"]
    assert not bad.exists()
    moved = run_dir / "experiences" / QUARANTINE_DIR / "ex" / bad.name
    assert moved.exists()
    assert "unreadable" in (moved.parent / (bad.name + ".error.txt")).read_text()
    assert f"quarantined experience chunk {bad}" in caplog.text
    m = reader.metrics()
    assert m["store/quarantined_chunks"] == 1 and m["store/quarantined_groups"] == 2
    # A reader restored from before the quarantine skips the moved chunk instead of waiting for it.
    again = StoreReader(run_dir)
    again.load_state(before)
    assert sorted(_ids(again.take(5, 0, timeout_s=1))) == ["o0", "t0", "t1", "t4", "t5"]


def test_chunk_whose_name_disagrees_with_its_content_is_quarantined(run_dir: Path) -> None:
    _write(run_dir, "ex", 0, ["a", "b"], per_chunk=2)
    ref = list_chunks(run_dir / "experiences")[0]
    ref.path.rename(ref.path.with_name(ref.path.name.replace("-2.h5", "-3.h5")))
    _write(run_dir, "ex", 1, ["c"], per_chunk=1)
    reader = StoreReader(run_dir)
    assert _ids(reader.take(1, 0, timeout_s=1)) == ["c"]
    assert (run_dir / "experiences" / QUARANTINE_DIR / "ex").is_dir()
    # counted once the reader has moved past it (counters move with the consumption state)
    assert reader.metrics()["store/quarantined_chunks"] == 1


def test_a_directory_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        StoreReader(tmp_path / "nope")
    with pytest.raises(UserError, match="neither config.yaml nor experiences/"):
        StoreReader(tmp_path)
    (tmp_path / "experiences").mkdir()
    (tmp_path / "experiences" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"holds \['notes.txt'\] but no STORE.json"):
        StoreReader(tmp_path)
    (tmp_path / "experiences" / "STORE.json").write_text('{"format": "something-else"}')
    with pytest.raises(UserError, match="is not an rfthpc run directory with an experience store"):
        ChunkWriter(tmp_path, "ex", 0)
    (tmp_path / "experiences" / "STORE.json").write_text("{not json")
    with pytest.raises(UserError, match="is not valid JSON"):
        open_store(tmp_path)


def test_store_files_are_private_by_default_and_shared_with_a_group_on_request(
    run_dir: Path, tmp_path: Path
) -> None:
    _write(run_dir, "ex", 0, ["a"], per_chunk=1)
    chunk = list_chunks(run_dir / "experiences")[0].path
    assert stat.S_IMODE(chunk.stat().st_mode) == 0o600
    assert stat.S_IMODE(chunk.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((run_dir / "experiences").stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "config.yaml").write_text("x")
    fsutil.set_share_group(fsutil.grp.getgrgid(os.getgid()).gr_name)
    try:
        _write(shared, "ex", 0, ["a"], per_chunk=1)
    finally:
        fsutil.set_share_group(None)
    chunk = list_chunks(shared / "experiences")[0].path
    assert stat.S_IMODE(chunk.stat().st_mode) == 0o660
    assert stat.S_IMODE(chunk.parent.stat().st_mode) == 0o2770


def test_a_missing_chunk_in_a_stream_is_waited_for_with_a_warning(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("rfthpc.store.reader._STALL_WARN_S", 0.0)
    _write(run_dir, "ex", 0, ["a", "b", "c"], per_chunk=1)
    reader = StoreReader(run_dir, poll_s=0.01)
    reader.take(1, 0, timeout_s=1)
    middle = sorted(r.path for r in list_chunks(run_dir / "experiences"))[1]
    middle.unlink()
    with caplog.at_level(logging.WARNING), pytest.raises(StoreTimeout):
        reader.take(1, 0, timeout_s=0.2)
    assert "chunk 1 is missing but later chunks exist" in caplog.text


def _explore(run_dir: Path, claims: TaskClaims, claimed: list) -> None:
    """Commit one group per claimed task, as an explorer process does (a new writer stream)."""
    writer = ChunkWriter(run_dir, "ex", 0, groups_per_chunk=1)
    for c in claimed:
        g = make_group(f"ts/{c.index}")
        g.info.update(taskset="ts", claims=claims.taskset, epoch=c.epoch, index=c.index)
        writer.add(g)
    writer.close()


def test_a_task_committed_twice_is_trained_once(run_dir: Path) -> None:
    """An explorer killed after committing its groups but before marking their tasks done: the
    restarted one explores them again; the reader takes each task once, also after a restart."""
    killed = TaskClaims(run_dir, "ts", 3, owner="ex/0")
    _explore(run_dir, killed, killed.claim(2))
    restarted = TaskClaims(run_dir, "ts", 3, owner="ex/0")  # a new attempt takes the claims back
    again = restarted.claim(3)
    assert sorted(c.index for c in again) == [0, 1, 2]
    _explore(run_dir, restarted, again)
    restarted.complete(again)
    reader = StoreReader(run_dir)
    assert _ids(reader.take(1, 0, timeout_s=1)) == ["ts/0"]
    resumed = StoreReader(run_dir)
    resumed.load_state(reader.state())
    assert sorted(_ids(resumed.take(2, 0, timeout_s=1))) == ["ts/1", "ts/2"]
    with pytest.raises(StoreTimeout):
        resumed.take(1, 0, timeout_s=0.3)
    assert resumed.metrics()["store/dropped_duplicate"] == 2 and resumed.metrics()["store/consumed"] == 3


def test_a_filesystem_error_delays_a_chunk_without_quarantining_it(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """EIO (an evicted Lustre client, an NFS failover; injected here, this machine has no such
    filesystem) is no sign of a damaged file: the stream waits, the chunk is read on a later poll."""
    import errno

    import h5py

    from rfthpc.store import chunks

    _write(run_dir, "ex", 0, ["t0", "t1", "t2", "t3"], per_chunk=2)
    failing = {"left": 3}

    def flaky(real):
        def opener(path, *args, **kwargs):
            if failing["left"] and str(path).endswith(".h5"):
                failing["left"] -= 1
                raise OSError(errno.EIO, "Input/output error", str(path))
            return real(path, *args, **kwargs)
        return opener

    # A chunk's groups are read through open() whole, its attributes through h5py: both may fail.
    monkeypatch.setattr(chunks.h5py, "File", flaky(h5py.File))
    monkeypatch.setattr(chunks, "open", flaky(open), raising=False)
    reader = StoreReader(run_dir, poll_s=0.01)
    with caplog.at_level(logging.WARNING):
        assert _ids(reader.take(4, 0, timeout_s=5)) == ["t0", "t1", "t2", "t3"]
    assert "could not be read" in caplog.text and failing["left"] == 0
    assert not (open_store(run_dir) / QUARANTINE_DIR).exists()
    assert reader.metrics()["store/quarantined_chunks"] == 0


def test_a_waiting_take_wakes_on_the_commit_doorbell_not_its_poll_interval(run_dir: Path) -> None:
    """The chunk is committed after the take's first look found nothing; with a poll interval of an
    hour and a 60 s timeout (simulated time), only the writer's ring can get it to the reader."""
    reader = StoreReader(run_dir, poll_s=3600.0)
    now = [0.0]
    committed: list[bool] = []

    def sleep(s: float) -> None:
        now[0] += s
        if not committed:
            _write(run_dir, "ex", 0, ["t0", "t1"], per_chunk=2)
            committed.append(True)

    reader.waiter.clock, reader.waiter.sleep = (lambda: now[0]), sleep
    assert _ids(reader.take(2, 0, timeout_s=60)) == ["t0", "t1"]
    assert reader.waiter.stats.checks == 2 and now[0] <= reader.waiter.policy.fast_s


def test_a_take_that_nothing_reaches_lists_the_store_at_its_poll_interval(run_dir: Path) -> None:
    reader = StoreReader(run_dir, poll_s=1.0)
    now = [0.0]
    reader.waiter.clock = lambda: now[0]
    reader.waiter.sleep = lambda s: now.__setitem__(0, now[0] + s)
    with pytest.raises(StoreTimeout):
        reader.take(1, 0, timeout_s=600)
    assert reader.waiter.stats.checks <= 600 + 2
