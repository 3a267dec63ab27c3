"""Task claims: selectors, epochs, limits, leases, restarts, and many explorer processes at once."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rfthpc.errors import ConfigError
from rfthpc.sharedfs.journal import Journal
from rfthpc.tasks.claims import ClaimSet, TaskClaims, read_state, shard_journal

PROCS = Path(__file__).with_name("procs.py")
REPO = Path(__file__).parents[2]


def _holders(run_dir: Path) -> set[str]:
    """Owners holding claims, in every shard of claim set `ts`."""
    owners = set()
    for path in (run_dir / "tasks" / "ts").glob("claims*"):
        if not path.is_dir():
            continue
        state = read_state(Journal(path))[1] or {"outstanding": {}}
        owners |= {c["owner"] for c in state["outstanding"].values()}
    return owners


def _pairs(claims: list) -> list[tuple[int, int]]:
    return [(c.epoch, c.index) for c in claims]


def test_sequential_epochs_then_finished(run_dir: Path) -> None:
    c = TaskClaims(run_dir, "ts", 3, total_epochs=2, owner="a")
    first = c.claim(4)
    assert _pairs(first) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert [x.serial for x in first] == [0, 1, 2, 3]
    assert c.complete(first) == first
    rest = c.claim(5)
    assert _pairs(rest) == [(1, 1), (1, 2)]
    assert not c.finished
    c.complete(rest)
    assert c.finished and c.claim(2) == []
    assert c.progress()["completed"] == 6


def test_shuffle_is_seeded_and_new_each_epoch(run_dir: Path) -> None:
    c = TaskClaims(run_dir, "a", 20, total_epochs=2, selector="shuffle", seed=3, owner="x")
    got = c.claim(40)
    e0 = [x.index for x in got if x.epoch == 0]
    e1 = [x.index for x in got if x.epoch == 1]
    assert sorted(e0) == sorted(e1) == list(range(20))
    assert e0 != e1 and e0 != list(range(20))
    same = TaskClaims(run_dir, "b", 20, total_epochs=2, selector="shuffle", seed=3, owner="x")
    assert [x.index for x in same.claim(40)] == e0 + e1


def test_a_huge_taskset_costs_nothing_under_the_lock(run_dir: Path) -> None:
    """The lock is held only for the transaction: a sequential order is arithmetic (no array of a
    trillion tasks), and a shuffled epoch's permutation is computed before the lock is taken (under
    it, every explorer's first claim of an epoch made the others queue behind it)."""
    seq = ClaimSet(run_dir, "seq", 10**12, shards=4, home=1, owner="a/1")
    assert [c.index for c in seq.claim(3)] == [1, 5, 9]
    shuffled = TaskClaims(run_dir, "shuf", 200_000, selector="shuffle", seed=5, owner="a/1")
    computed_before_lock: list[bool] = []
    lock = shuffled._lock

    class Watched:
        def __enter__(self):
            computed_before_lock.append(0 in shuffled._orders)
            return lock.__enter__()

        def __exit__(self, *exc):
            return lock.__exit__(*exc)

    shuffled._lock = Watched()
    got = shuffled.claim(2)
    assert computed_before_lock == [True]
    assert [c.index for c in got] == list(np.random.default_rng([5, 0]).permutation(200_000)[:2])


def test_max_tasks_stops_claiming(run_dir: Path) -> None:
    c = TaskClaims(run_dir, "ts", 10, total_epochs=3, owner="a", max_tasks=4)
    got = c.claim(10)
    assert len(got) == 4
    c.complete(got)
    assert c.finished and c.claim(1) == []


def test_released_claims_are_handed_out_first(run_dir: Path) -> None:
    a = TaskClaims(run_dir, "ts", 10, owner="a")
    b = TaskClaims(run_dir, "ts", 10, owner="b")
    got = a.claim(3)
    a.release(got[1:])
    assert _pairs(b.claim(3)) == [(0, 1), (0, 2), (0, 3)]


def test_dead_owner_claims_are_reclaimed_after_the_lease(run_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = TaskClaims(run_dir, "ts", 4, owner="a", lease_s=0.3)
    b = TaskClaims(run_dir, "ts", 4, owner="b", lease_s=0.3)
    lost = a.claim(2)
    assert _pairs(b.claim(2)) == [(0, 2), (0, 3)]
    b.heartbeat()
    assert b.claim(1, timeout_s=0) == []  # a's lease still runs
    time.sleep(0.4)
    b.heartbeat()
    with caplog.at_level(logging.WARNING):
        assert _pairs(b.claim(2)) == [(0, 0), (0, 1)]
    assert "reclaimed task 0:0" in caplog.text and "owner a sent no heartbeat" in caplog.text
    assert a.complete(lost) == []  # too late: b holds them now


def _count_transactions(claims: TaskClaims) -> list[int]:
    """Count `claims`' transactions on the claims file (each takes the lock)."""
    count = [0]
    inner = claims._transact_once

    def counted(change):
        count[0] += 1
        return inner(change)

    claims._transact_once = counted  # type: ignore[method-assign]
    return count


def test_claiming_batches_ahead_takes_them_in_one_transaction(run_dir: Path) -> None:
    """With `ahead=3` one transaction claims three batches; the next two claims come from the reserve;
    `close` gives back what is left, which another explorer then gets first."""
    a = TaskClaims(run_dir, "ts", 20, owner="a", ahead=3)
    b = TaskClaims(run_dir, "ts", 20, owner="b")
    transactions = _count_transactions(a)
    assert _pairs(a.claim(2)) == [(0, 0), (0, 1)]
    assert _holders(run_dir) == {"a"} and len(read_state(shard_journal(run_dir, "ts", 0))[1]["outstanding"]) == 6
    assert _pairs(a.claim(2)) == [(0, 2), (0, 3)]
    assert transactions == [1]
    a.close()
    assert transactions == [2]
    assert _pairs(b.claim(3)) == [(0, 4), (0, 5), (0, 6)]


def test_a_dead_owners_reserve_is_reclaimed_with_its_batch(run_dir: Path) -> None:
    a = TaskClaims(run_dir, "ts", 6, owner="a", lease_s=0.3, ahead=3)
    b = TaskClaims(run_dir, "ts", 6, owner="b", lease_s=0.3)
    a.claim(2)  # and 4 more in reserve; then a dies
    time.sleep(0.4)
    assert sorted(_pairs(b.claim(6))) == [(0, i) for i in range(6)]


def test_deferred_completions_settle_in_the_next_transaction(run_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = TaskClaims(run_dir, "ts", 8, owner="a", lease_s=0.3)
    b = TaskClaims(run_dir, "ts", 8, owner="b", lease_s=0.3)
    transactions = _count_transactions(a)
    first = a.claim(2)
    assert a.complete(first, defer=True) == first and transactions == [1]
    assert a.progress()["completed"] == 0                      # recorded locally only
    second = a.claim(2)
    assert transactions == [2] and a.progress()["completed"] == 2 and a.progress()["outstanding"] == 2
    a.complete(second[:1], defer=True)
    a.complete(second[1:], produced_group=False, defer=True)
    a.heartbeat()
    assert a.progress()["completed"] == 4 and a.progress()["failed"] == 1
    # A deferred completion of a task another explorer took over (this one missed its lease) is refused.
    late = a.claim(1)
    time.sleep(0.4)
    assert _pairs(b.claim(1)) == _pairs(late)
    a.complete(late, defer=True)
    with caplog.at_level(logging.WARNING):
        a.close()
    assert f"task {late[0].key} is no longer claimed by a" in caplog.text
    assert a.progress()["completed"] == 4


def test_a_sharded_claim_set_hands_out_every_task_once(run_dir: Path) -> None:
    """Three shards: position p of the epoch's order belongs to shard p % 3; each explorer claims from
    its home shard first, then from the others; serials are what one file would have given."""
    sets = [ClaimSet(run_dir, "ts", 10, shards=3, home=h, owner=f"e/{h}") for h in range(3)]
    first = [sets[h].claim(2) for h in range(3)]
    assert [[c.index for c in got] for got in first] == [[0, 3], [1, 4], [2, 5]]
    rest = []
    while batch := sets[0].claim(4, timeout_s=0):   # its shard runs dry, then it takes from the others
        rest += batch
    assert sorted(c.index for c in rest) == [6, 7, 8, 9] and {c.shard for c in rest} == {0, 1, 2}
    claims = [c for got in first for c in got] + rest
    assert sorted(c.serial for c in claims) == list(range(10))
    assert not sets[0].finished
    for h, got in enumerate(first):
        sets[h].complete(got)
    sets[0].complete(rest)
    status = TaskClaims.read_status(run_dir, "ts")
    assert status is not None and len(status.shards) == 3 and status.completed == 10 and status.finished


def test_a_sharded_claim_sets_budget_is_split_exactly(run_dir: Path) -> None:
    claims = ClaimSet(run_dir, "ts", 10, shards=3, owner="e/0", max_tasks=7)
    got = claims.claim(10)
    while batch := claims.claim(10, timeout_s=0):
        got += batch
    assert sorted(c.index for c in got) == list(range(7))
    status = claims.status()
    assert status.limit == 7 and status.issued == 7 and not status.finished
    claims.complete(got)
    assert claims.finished


def test_the_shard_count_is_the_one_the_claim_set_was_created_with(run_dir: Path) -> None:
    first = ClaimSet(run_dir, "ts", 8, shards=2, owner="a/0")
    joiner = ClaimSet(run_dir, "ts", 8, shards=4, home=3, owner="b/3")
    assert first.shards == joiner.shards == 2 and joiner.home == 1
    held = joiner.claim(4)
    assert [c.index for c in held] == [1, 3, 5, 7]
    mine = first.claim(8)
    assert [c.index for c in mine] == [0, 2, 4, 6]
    first.complete(mine)
    assert not first.finished                       # b still holds its four
    joiner.complete(held)
    assert first.finished


def test_claims_of_dead_owners_in_a_shard_no_live_explorer_calls_home_are_reclaimed(run_dir: Path) -> None:
    """Shard 1's only explorer dies holding claims: the shard has nothing fresh or given back, yet the
    survivor must still visit it, since only a transaction takes a dead owner's claims back."""
    dead = ClaimSet(run_dir, "ts", 4, shards=2, home=1, owner="e/1", lease_s=0.3)
    held = dead.claim(2)
    assert [c.index for c in held] == [1, 3]
    survivor = ClaimSet(run_dir, "ts", 4, shards=2, home=0, owner="e/0", lease_s=0.3)
    survivor.complete(survivor.claim(2))
    time.sleep(0.4)
    taken = survivor.claim(2, timeout_s=10, poll_s=0.05)
    assert [c.index for c in taken] == [1, 3]
    survivor.complete(taken)
    assert survivor.finished


def test_a_reserve_held_in_another_shard_is_handed_out(run_dir: Path) -> None:
    """Claims taken ahead in a shard that has nothing else free are this process's next batch, not
    left to expire while it waits on its home shard."""
    busy = ClaimSet(run_dir, "ts", 4, shards=2, home=0, owner="e/0")
    theirs = busy.claim(2)
    mine = ClaimSet(run_dir, "ts", 4, shards=2, home=0, owner="e/2", ahead=2)
    first = mine.claim(1)
    assert [(c.shard, c.index) for c in first] == [(1, 1)]
    busy.complete(theirs)
    second = mine.claim(1, timeout_s=10, poll_s=0.05)
    assert [(c.shard, c.index) for c in second] == [(1, 3)]
    mine.complete(first + second)
    assert mine.finished


def test_claim_waits_for_a_dead_owners_tasks(run_dir: Path) -> None:
    a = TaskClaims(run_dir, "ts", 2, owner="a", lease_s=0.3)
    b = TaskClaims(run_dir, "ts", 2, owner="b", lease_s=0.3)
    a.claim(2)
    waits = []
    t = time.monotonic()
    got = b.claim(2, poll_s=0.05, on_wait=lambda: waits.append(1))
    assert _pairs(got) == [(0, 0), (0, 1)] and waits
    assert 0.25 < time.monotonic() - t < 3


def test_heartbeat_keeps_claims(run_dir: Path) -> None:
    a = TaskClaims(run_dir, "ts", 2, owner="a", lease_s=0.4)
    b = TaskClaims(run_dir, "ts", 2, owner="b", lease_s=0.4)
    held = a.claim(2)
    for _ in range(4):
        time.sleep(0.15)
        a.heartbeat()
    assert b.claim(1, timeout_s=0) == []
    assert a.complete(held) == held


def test_restarted_owner_takes_back_its_claims_at_once(run_dir: Path) -> None:
    before = TaskClaims(run_dir, "ts", 5, owner="explorer/3", lease_s=300)
    held = before.claim(2)
    after = TaskClaims(run_dir, "ts", 5, owner="explorer/3", lease_s=300)  # requeued: new process
    assert _pairs(after.claim(3)) == _pairs(held) + [(0, 2)]


def test_explorers_joining_with_other_settings_are_refused(run_dir: Path) -> None:
    TaskClaims(run_dir, "ts", 5, total_epochs=2, owner="a").claim(1)
    with pytest.raises(ConfigError, match="started with total_epochs=2, but this explorer has total_epochs=3"):
        TaskClaims(run_dir, "ts", 5, total_epochs=3, owner="b").claim(1)
    with pytest.raises(ConfigError, match="selector 'random' is unknown"):
        TaskClaims(run_dir, "ts", 5, selector="random")


@pytest.mark.slow
@pytest.mark.timeout(1500)  # above the 300 s kill wait plus the 900 s hang guard below
@pytest.mark.parametrize(("kind", "ahead", "shards"), [("link", 2, 3), ("strict-soft", 1, 1)])
def test_many_explorer_processes_explore_each_task_once_despite_kills(kind: str, ahead: int, shards: int,
                                                                      run_dir: Path, tmp_path: Path) -> None:
    n_tasks, epochs = 30, 2
    out = tmp_path / "done.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def start(owner: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(PROCS), "claimer", str(run_dir), owner, str(n_tasks),
                                 str(epochs), "1.0", kind, str(ahead), str(shards), str(out)], env=env)

    def lines() -> list[dict]:
        return [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []

    procs = {f"explorer/{i}": start(f"explorer/{i}") for i in range(6)}
    victims: list[str] = []
    try:
        # Kill two explorers, each once it has completed a batch and holds its next claims (it explores
        # 0.3 s per task). Victims are whichever get there first: on a loaded machine a given
        # explorer may already have finished its share.
        deadline = time.monotonic() + 300
        while len(victims) < 2 and time.monotonic() < deadline:
            finished = {x["owner"] for x in lines()}
            holders = _holders(run_dir)
            for owner, p in procs.items():
                if owner not in victims and p.poll() is None and owner in finished and owner in holders:
                    p.send_signal(signal.SIGKILL)
                    p.wait()
                    victims.append(owner)
                    break
            time.sleep(0.005)
        for p in procs.values():
            # A guard against a hang, not a time budget: on a loaded machine the six explorers, their
            # 0.3 s per task and the expired leases they wait out take minutes.
            p.wait(timeout=900)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    assert len(victims) == 2, "no explorer was caught holding claims after a completed batch"
    assert {o: p.returncode for o, p in procs.items()} == {o: -9 if o in victims else 0 for o in procs}
    done = [tuple(pair) for x in lines() for pair in x["done"]]
    assert len(done) == len(set(done)), "a task was completed twice"
    assert sorted(done) == [(e, i) for e in range(epochs) for i in range(n_tasks)]
    progress = TaskClaims(run_dir, "ts", n_tasks, total_epochs=epochs, selector="shuffle", seed=7).progress()
    assert progress["reclaimed"] >= 2 and progress["finished"]


def test_claims_stay_held_through_a_call_longer_than_the_lease(run_dir: Path) -> None:
    """The explorer's heartbeat thread keeps its claims while its loop is blocked (one generation call
    longer than lease_s): another explorer gets none of them, as it would without the thread."""
    from rfthpc.explorer.heartbeat import Heartbeat
    from rfthpc.rundir.explorer_meta import Progress
    from rfthpc.rundir.paths import RunDir
    from rfthpc.weights.follow import WeightFollower

    a = TaskClaims(run_dir, "ts", 2, owner="a", lease_s=0.5)
    b = TaskClaims(run_dir, "ts", 2, owner="b", lease_s=0.5)
    held = a.claim(2)
    run = RunDir(run_dir)
    with Heartbeat(0.1, lambda: [a], WeightFollower(run, "a", 0), Progress(run, "a", 0, lease_s=0.5)):
        time.sleep(1.5)  # the blocked loop: no heartbeat of its own
        assert b.claim(1, timeout_s=0) == []
    assert a.complete(held) == held
    fresh = TaskClaims(run_dir, "ts2", 2, owner="a", lease_s=0.5)
    other = TaskClaims(run_dir, "ts2", 2, owner="b", lease_s=0.5)
    taken = fresh.claim(2)
    time.sleep(1.0)  # the same call without the thread: the claims are taken over
    assert _pairs(other.claim(2, timeout_s=0)) == _pairs(taken)


@pytest.mark.parametrize("kind", ["link", "strict-soft", "soft"])
def test_a_holder_stalled_past_stale_s_redoes_its_change_instead_of_undoing_anothers(
    kind: str, run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Explorer a stalls inside its transaction (a suspended job) longer than the lock's stale_s; b breaks
    the lock and claims task 0. a's late write would put back the state without b's claim (task 0
    handed out twice); a redoes its change on b's state instead and gets task 1."""
    a = TaskClaims(run_dir, "ts", 4, owner="a", lock=kind, lock_stale_s=0.5)
    b = TaskClaims(run_dir, "ts", 4, owner="b", lock=kind, lock_stale_s=0.5)
    stalled = threading.Event()
    calls = []

    def stall_once(state: dict, now: float) -> list:
        got = a._claim_now(state, 1)
        calls.append(_pairs(got))
        if len(calls) == 1:
            stalled.set()
            time.sleep(2.0)
        return got

    with caplog.at_level(logging.WARNING):
        holder = threading.Thread(target=lambda: calls.append(a._transact(stall_once)))
        holder.start()
        assert stalled.wait(10)
        got_b = b.claim(1, timeout_s=0)
        holder.join(20)
    assert _pairs(got_b) == [(0, 0)]
    assert calls[0] == [(0, 0)] and calls[1] == [(0, 1)]  # the first try was redone on b's state
    version, state = read_state(shard_journal(run_dir, "ts", 0))
    assert {k: c["owner"] for k, c in state["outstanding"].items()} == {"0:0": "b", "0:1": "a"}
    assert state["issued"] == 2 and version == 2
    assert "redone on the newer state" in caplog.text and "breaking lock" in caplog.text


def test_a_lock_that_never_excludes_is_named_after_repeated_collisions(run_dir: Path) -> None:
    """Another process rewrites the state during every transaction (as with `flock` across NFS clients):
    after a few redos the error names the lock kind and the one that excludes everywhere."""
    a = TaskClaims(run_dir, "ts", 4, owner="a", lock="flock")
    a.heartbeat()
    journal = shard_journal(run_dir, "ts", 0)

    def collide(state: dict, now: float) -> None:
        _, other = read_state(Journal(journal.path))
        Journal(journal.path).append(json.dumps(other).encode())

    with pytest.raises(ConfigError, match=r"lock kind 'flock' does not exclude .*filesystem.lock_type: link"):
        a._transact(collide)
    assert read_state(Journal(journal.path))[0] == 1 + 4  # every try was refused; only the collisions landed
