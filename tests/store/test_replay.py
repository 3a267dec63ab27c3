"""Experience replay on a real store: priority order, reuse limits, capacity, staleness, resuming, GC.

The sequences of Trinity-RFT's own queue tests (tests/buffer/queue_test.py: a capacity of 4 items,
`linear_decay` with decay 0.6, `decay_limit_randomization` with decay 1.2 and a limit of 2) are
replayed here with one group per Trinity item, so the order is checked against the numbers Trinity
expects, not against this implementation.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from rfthpc.algorithms.replay import Entry, ReplayBuffer, ReplayPolicy, Slot, decay_limit_randomization, linear_decay
from rfthpc.errors import ConfigError
from rfthpc.store.gc import collect_garbage
from rfthpc.store.layout import list_chunks
from rfthpc.store.reader import StoreReader, StoreTimeout
from rfthpc.store.reader_files import ReaderState
from rfthpc.store.writer import ChunkWriter

from .groups import make_group


def _write(run_dir: Path, versions: list[int], per_chunk: int = 2, explorer: str = "ex", rank: int = 0,
           claims: str | None = None) -> None:
    """One group per version, named v<version>, committed in this order."""
    w = ChunkWriter(run_dir, explorer, rank, groups_per_chunk=per_chunk)
    for i, v in enumerate(versions):
        g = make_group(f"v{v}", version=v, explorer=explorer, rank=rank)
        if claims is not None:
            g.info.update(claims=claims, epoch=0, index=i)
        w.add(g)
    w.close()


def _take(reader: StoreReader, n: int, version: int = 0) -> list[str]:
    return [g.task_id for g in reader.take(n, version, timeout_s=0.5)]


def _uses(reader: StoreReader) -> dict[str, int]:
    """Task id -> reads so far of each group still in the replay buffer (version -> v<version>)."""
    return {f"v{e.version}": e.uses for e in reader.state().replay.values()}


def test_priority_functions_follow_trinity() -> None:
    rng = random.Random(0)
    assert linear_decay(4, 3, rng, decay=0.6) == pytest.approx(2.2)
    assert decay_limit_randomization(4, 1, rng, decay=1.2, use_count_limit=2) == pytest.approx(2.8)
    assert decay_limit_randomization(4, 2, rng, decay=1.2, use_count_limit=2) is None
    assert decay_limit_randomization(4, 50, rng, use_count_limit=0) == pytest.approx(-96.0)
    noisy = [decay_limit_randomization(4, 0, rng, sigma=1.0) for _ in range(200)]
    assert len(set(noisy)) == 200 and abs(sum(noisy) / 200 - 4) < 0.3


def test_without_reuse_the_newest_policy_is_read_first_and_each_group_once(run_dir: Path) -> None:
    _write(run_dir, [0, 2, 1], explorer="ea")
    _write(run_dir, [2, 0, 3], explorer="eb")
    reader = StoreReader(run_dir, replay=ReplayPolicy(reuse_cooldown_s=None))
    # Equal priorities: commit order (ea's v2 was committed before eb's).
    assert _take(reader, 4) == ["v3", "v2", "v2", "v1"]
    assert [g.explorer for g in reader.take(2, 0, timeout_s=0.5)] == ["ea", "eb"]
    with pytest.raises(StoreTimeout):
        reader.take(1, 0, timeout_s=0.3)
    assert reader.metrics()["store/consumed"] == 6 and reader.metrics()["store/reused"] == 0
    assert reader.state().replay == {}


def test_linear_decay_reuse_matches_trinitys_sequence(run_dir: Path) -> None:
    _write(run_dir, [0, 1, 2, 3, 4], claims="ts")
    reader = StoreReader(run_dir, replay=ReplayPolicy(capacity=4, reuse_cooldown_s=0.0,
                                                      priority_fn_args={"decay": 0.6}))
    reader.track_tasksets(["ts"])
    # v0 entered a full buffer's lowest place and was pushed out by v4 before anyone read it: lost.
    assert _take(reader, 2) == ["v4", "v3"]
    assert reader.metrics()["store/evicted"] == 1 and reader.losses() == {"ts": 1}
    # priority: v4 3.4, v3 2.4, v2 2.0, v1 1.0
    assert _take(reader, 2) == ["v4", "v3"]
    # v4 2.8, v3 1.8, v2 2.0, v1 1.0
    assert _take(reader, 2) == ["v4", "v2"]
    # v4 2.2, v3 1.8, v2 1.4, v1 1.0
    assert _take(reader, 2) == ["v4", "v3"]
    # v4 1.6, v3 1.2, v2 1.4, v1 1.0
    assert _take(reader, 2) == ["v4", "v2"]
    # v4 1.0, v3 1.2, v2 0.8, v1 1.0: v1 waited in the buffer since it was committed, v4 re-entered later
    assert _take(reader, 2) == ["v3", "v1"]
    assert _uses(reader) == {"v4": 5, "v3": 4, "v2": 2, "v1": 1}
    m = reader.metrics()
    assert (m["store/consumed"], m["store/reused"], m["store/batch_reused"], m["store/batch_reads_max"]) == \
        (4, 8, 1, 4)
    assert m["store/replay_size"] == 4


def test_decay_limit_randomization_stops_at_the_use_count_limit(run_dir: Path) -> None:
    _write(run_dir, [0, 1, 2, 3, 4])
    policy = ReplayPolicy(capacity=4, reuse_cooldown_s=0.0, priority_fn="decay_limit_randomization",
                          priority_fn_args={"decay": 1.2, "use_count_limit": 2, "sigma": 0.0})
    reader = StoreReader(run_dir, replay=policy)
    assert _take(reader, 2) == ["v4", "v3"]
    assert _take(reader, 2) == ["v4", "v2"]  # v4 2.8, v3 1.8, v2 2.0, v1 1.0
    assert len(reader.state().replay) == 3  # v4 was read twice: it left
    assert _take(reader, 2) == ["v3", "v1"]  # v3 1.8, v2 0.8, v1 1.0
    assert _uses(reader) == {"v2": 1, "v1": 1}
    assert _take(reader, 2) == ["v2", "v1"]
    with pytest.raises(StoreTimeout):
        reader.take(1, 0, timeout_s=0.3)
    assert reader.state().replay == {}
    m = reader.metrics()
    assert (m["store/consumed"], m["store/reused"], m["store/evicted"], m["store/pending"]) == (4, 4, 1, 0)


def test_a_group_cooling_down_is_not_read_until_its_cooldown_is_over(run_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import rfthpc.store.reader as reader_module

    clock = {"now": 1000.0}
    monkeypatch.setattr(reader_module.time, "time", lambda: clock["now"])
    _write(run_dir, [5, 1])
    reader = StoreReader(run_dir, replay=ReplayPolicy(reuse_cooldown_s=30.0))
    assert _take(reader, 1) == ["v5"]
    assert _take(reader, 1) == ["v1"]  # v5 (priority 3) is cooling down until 1030
    with pytest.raises(StoreTimeout):
        reader.take(1, 0, timeout_s=0.2)
    assert reader.metrics()["store/replay_cooling"] == 2
    clock["now"] = 1030.0
    assert _take(reader, 1) == ["v5"]


def test_a_group_leaves_once_too_stale_and_counts_as_lost_only_if_never_read(run_dir: Path) -> None:
    _write(run_dir, [0, 0, 2], claims="ts")
    reader = StoreReader(run_dir, max_staleness=1, replay=ReplayPolicy(reuse_cooldown_s=0.0,
                                                                       priority_fn_args={"decay": 0.0}))
    reader.track_tasksets(["ts"])
    assert _take(reader, 2, version=1) == ["v2", "v0"]
    # At version 2 both v0 are too stale: the one read before simply leaves, the other is lost.
    assert _take(reader, 1, version=2) == ["v2"]
    assert reader.metrics()["store/dropped_stale"] == 1 and reader.losses() == {"ts": 1}
    assert set(_uses(reader)) == {"v2"}
    assert _take(reader, 1, version=3) == ["v2"]
    with pytest.raises(StoreTimeout):  # too stale at version 4: it leaves, and was read, so nothing is lost
        reader.take(1, 4, timeout_s=0.2)
    assert reader.losses() == {"ts": 1}


def test_a_resumed_reader_reads_the_same_groups_as_the_one_that_went_on(run_dir: Path) -> None:
    _write(run_dir, list(range(12)), per_chunk=3)
    policy = ReplayPolicy(capacity=8, reuse_cooldown_s=0.0, priority_fn="decay_limit_randomization",
                          priority_fn_args={"decay": 1.5, "use_count_limit": 3})
    reader = StoreReader(run_dir, replay=policy)
    for _ in range(2):
        _take(reader, 4)
    saved = ReaderState.from_dict(json.loads(json.dumps(reader.state().to_dict())))
    assert saved == reader.state() and saved.replay
    went_on = [_take(reader, 4) for _ in range(3)]
    resumed = StoreReader(run_dir, replay=policy)
    resumed.load_state(saved)
    assert [_take(resumed, 4) for _ in range(3)] == went_on

    def reads(state: ReaderState) -> dict[Slot, tuple[int, float]]:
        return {slot: (e.uses, e.priority) for slot, e in state.replay.items()}

    assert reads(resumed.state()) == reads(reader.state())
    assert resumed.state().counters == reader.state().counters


def test_gc_keeps_the_chunks_the_replay_buffer_points_into(run_dir: Path) -> None:
    _write(run_dir, [9, 1, 1, 1], per_chunk=2)
    policy = ReplayPolicy(reuse_cooldown_s=0.0, priority_fn="decay_limit_randomization",
                          priority_fn_args={"decay": 0.0, "use_count_limit": 2})
    reader = StoreReader(run_dir, replay=policy)
    assert _take(reader, 4) == ["v9", "v1", "v1", "v1"]
    # Both chunks are behind the cursor; the first is read twice over, the second holds a group read once.
    assert _take(reader, 3) == ["v9", "v1", "v1"]
    (second,) = {slot.seq for slot in reader.state().replay}
    reader.mark_checkpointed(reader.state())
    assert collect_garbage(run_dir)["chunks"] == 1
    assert [ref.seq for ref in list_chunks(run_dir / "experiences")] == [second] == [1]
    resumed = StoreReader(run_dir, replay=policy)
    resumed.load_state(reader.state())
    assert _take(resumed, 1) == ["v1"]
    resumed.mark_checkpointed(resumed.state())
    assert collect_garbage(run_dir)["chunks"] == 1
    assert list_chunks(run_dir / "experiences") == []


def test_without_replay_the_groups_left_unread_in_the_buffer_are_still_read_once(run_dir: Path) -> None:
    _write(run_dir, [0, 1, 2, 3, 4])
    reader = StoreReader(run_dir, replay=ReplayPolicy(reuse_cooldown_s=0.0))
    assert _take(reader, 2) == ["v4", "v3"]
    reader.replay = None  # the next stage reads without replay
    _write(run_dir, [7, 8], rank=1)
    assert _take(reader, 2) == ["v2", "v1"]
    assert _take(reader, 2) == ["v0", "v7"]  # the buffer's last one, then commit order
    assert _take(reader, 1) == ["v8"]
    with pytest.raises(StoreTimeout):
        reader.take(1, 0, timeout_s=0.2)
    assert reader.state().replay == {}


def test_a_full_buffer_turns_away_a_group_of_lower_priority() -> None:
    buf = ReplayBuffer()
    for i, p in enumerate([3.0, 1.0, 1.0]):
        assert buf.enter(Slot("s", 0, i), Entry(0, 0, p, since=float(i)), capacity=3) == []
    low = Entry(0, 0, 0.5, since=9.0)
    assert buf.enter(Slot("s", 1, 0), low, capacity=3) == [(Slot("s", 1, 0), low)]
    # Equal to the lowest: the earliest of the lowest is pushed out.
    out = buf.enter(Slot("s", 1, 1), Entry(0, 0, 1.0, since=10.0), capacity=3)
    assert out == [(Slot("s", 0, 1), Entry(0, 0, 1.0, since=1.0))]
    assert list(buf.order()) == [Slot("s", 0, 0), Slot("s", 0, 2), Slot("s", 1, 1)]


def test_bad_replay_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="capacity: 0"):
        ReplayPolicy(capacity=0)
    with pytest.raises(ConfigError, match="reuse_cooldown_time: -1"):
        ReplayPolicy(reuse_cooldown_s=-1)
    with pytest.raises(ConfigError, match="priority_fn_args: 'limit' not accepted"):
        ReplayPolicy(priority_fn="decay_limit_randomization", priority_fn_args={"limit": 2})
    with pytest.raises(ConfigError, match="use_count_limit must be a whole number"):
        ReplayPolicy(priority_fn="decay_limit_randomization", priority_fn_args={"use_count_limit": 1.5})
    with pytest.raises(ConfigError, match="unknown replay priority function 'fifo'"):
        ReplayPolicy(priority_fn="fifo")


def test_inspect_and_the_audit_count_unread_groups_in_the_buffer_as_pending(run_dir: Path) -> None:
    from rfthpc.store.audit import consumption, export_groups
    from rfthpc.store.inspect import format_inspect, inspect_store

    _write(run_dir, [0, 1, 2, 3, 4])
    reader = StoreReader(run_dir, replay=ReplayPolicy(capacity=4, reuse_cooldown_s=0.0))
    assert _take(reader, 2) == ["v4", "v3"]
    reader.mark_checkpointed(reader.state())
    counts = inspect_store(run_dir)["counts"]
    assert (counts["committed"], counts["consumed"], counts["evicted"], counts["pending"]) == (5, 2, 1, 2)
    assert counts["replay_buffer"] == 4
    assert "replay: 4 groups in the buffer, 0 reads after the first, 1 pushed out" in format_inspect(
        inspect_store(run_dir))
    seen = consumption(run_dir)
    assert sorted(g.task_id for g in seen.covered) == ["v0", "v3", "v4"]
    assert sorted(g.task_id for g in seen.pending) == ["v1", "v2"]
    assert seen.groups_taken_twice() == 0
    out = io.StringIO()
    assert export_groups(run_dir, out) == {"taken": 3, "pending": 2}


def test_a_missing_chunk_is_warned_about_and_its_entries_wait_until_they_leave(
        run_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    _write(run_dir, [5, 4], per_chunk=1)
    policy = ReplayPolicy(reuse_cooldown_s=0.0, priority_fn_args={"decay": 0.0})
    reader = StoreReader(run_dir, max_staleness=2, replay=policy)
    assert _take(reader, 2, version=5) == ["v5", "v4"]
    saved = reader.state()
    (first,) = [ref for ref in list_chunks(run_dir / "experiences") if ref.seq == 0]
    first.path.unlink()  # by hand, or collected after a resume from an older checkpoint
    resumed = StoreReader(run_dir, max_staleness=2, replay=policy)
    resumed.load_state(saved)
    with caplog.at_level("WARNING"):
        assert _take(resumed, 1, version=6) == ["v4"]
        assert _take(resumed, 1, version=6) == ["v4"]
    assert sum("is not in the store" in r.message for r in caplog.records) == 1
    assert len(resumed.state().replay) == 2
    with pytest.raises(StoreTimeout):  # v4 and v5 are both too stale at version 8, none left to read
        resumed.take(1, 8, timeout_s=0.2)
