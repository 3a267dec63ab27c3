"""Refills: every group the trainer drops as stale (or a task that gives none) is replaced by a fresh
task, within the taskset's epochs, so the trainer reaches total_steps; with no trainer, the budget
stays total_steps x batch_size."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rfthpc.rundir.lost_groups import read_losses
from rfthpc.sharedfs.fileops import read_json
from rfthpc.store import ChunkWriter, StoreReader, StoreTimeout
from rfthpc.tasks.claims import TaskClaims

from .groups import make_group

PROCS = Path(__file__).with_name("refill_procs.py")
REPO = Path(__file__).parents[2]


def _commit(run_dir: Path, claims: list, versions: list[int]) -> None:
    with ChunkWriter(run_dir, "ex", 0, groups_per_chunk=len(claims)) as w:
        for c, v in zip(claims, versions, strict=True):
            g = make_group(f"t{c.index}", version=v)
            g.info = {"claims": c.taskset, "epoch": c.epoch, "index": c.index}
            w.add(g)


def test_drops_reported_by_the_trainer_raise_the_budget(run_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    claims = TaskClaims(run_dir, "ts", 10, owner="ex/0", max_tasks=4)
    first = claims.claim(4)
    _commit(run_dir, first, [0, 0, 2, 2])
    claims.complete(first)
    assert claims.finished and claims.status().refill == 0
    reader = StoreReader(run_dir, max_staleness=1)
    reader.track_tasksets(["ts"])
    assert read_losses(run_dir / "experiences") == {"ts": 0}
    # Version 3 drops the two version-0 groups. The take does not complete, but the drops it walked
    # past are reported at once: the trainer is waiting for exactly their replacements.
    with pytest.raises(StoreTimeout):
        reader.take(4, current_version=3, timeout_s=0.2)
    assert read_losses(run_dir / "experiences") == {"ts": 2} and reader.losses() == {"ts": 2}
    assert not claims.finished
    with caplog.at_level("INFO", logger="rfthpc.tasks.claims"):
        more = claims.claim(4)
    assert [c.serial for c in more] == [4, 5]
    # Two groups were lost before them: the trainer consumes them in the places of serials 2 and 3.
    assert [c.position for c in more] == [2, 3]
    assert "2 more fresh task(s)" in caplog.text
    _commit(run_dir, more, [3, 3])
    claims.complete(more)
    assert [g.task_id for g in reader.take(4, current_version=3, timeout_s=1)] == ["t2", "t3", "t4", "t5"]
    assert reader.metrics()["store/dropped_stale"] == 2 and reader.state().lost == {"ts": 2}
    assert claims.finished and claims.status().issued == 6


def test_without_a_trainer_the_budget_stays(run_dir: Path) -> None:
    """`mode: explore` alone: nothing reports losses, so failed tasks are not replaced either."""
    claims = TaskClaims(run_dir, "ts", 10, owner="ex/0", max_tasks=3)
    got = claims.claim(3)
    claims.complete(got[:1])
    claims.complete(got[1:], produced_group=False)
    status = claims.status()
    assert status.finished and not status.exhausted and status.failed == 2 and status.refill == 0
    assert claims.claim(1) == []
    # A trainer consuming another claim set does not change this one's budget.
    StoreReader(run_dir, max_staleness=0).track_tasksets(["other"])
    assert claims.claim(1) == [] and claims.status().refill == 0


def test_tasks_that_give_no_group_are_replaced_for_a_trainer(run_dir: Path) -> None:
    StoreReader(run_dir, max_staleness=0).track_tasksets(["ts"])
    claims = TaskClaims(run_dir, "ts", 10, owner="ex/0", max_tasks=3)
    got = claims.claim(3)
    claims.complete(got[:1])
    claims.complete(got[1:], produced_group=False)
    assert not claims.finished and claims.status().refill == 2
    assert [(c.serial, c.position) for c in claims.claim(5)] == [(3, 1), (4, 2)]


def test_refill_never_shrinks_and_stops_at_the_last_epoch(run_dir: Path) -> None:
    claims = TaskClaims(run_dir, "ts", 5, total_epochs=1, owner="ex/0", max_tasks=4)
    got = claims.claim(4)
    _commit(run_dir, got, [0, 0, 0, 0])
    claims.complete(got)
    reader = StoreReader(run_dir, max_staleness=0)
    reader.track_tasksets(["ts"])
    before = reader.state()
    with pytest.raises(StoreTimeout):
        reader.take(4, current_version=1, timeout_s=0.2)  # all four are stale
    assert claims.status().refill == 4 and not claims.finished
    (last,) = claims.claim(4)  # one task is left in the only epoch
    claims.complete([last])
    # A trainer resumed from a checkpoint taken before the drops reports none for a while.
    reader.load_state(before)
    assert read_losses(run_dir / "experiences") == {"ts": 0}
    status = TaskClaims.read_status(run_dir, "ts")
    assert status is not None and status.refill == 4 and status.issued == 5
    assert status.finished and status.exhausted and status.limit == 8


def test_trainer_sees_its_own_drops_before_any_explorer_does(run_dir: Path) -> None:
    claims = TaskClaims(run_dir, "ts", 10, owner="ex/0", max_tasks=2)
    claims.complete(claims.claim(2))
    before = TaskClaims.read_status(run_dir, "ts")
    assert before is not None and before.finished
    after = TaskClaims.read_status(run_dir, "ts", lost=1)
    assert after is not None and not after.finished and after.limit == 3
    assert TaskClaims.read_status(run_dir, "missing") is None


def _start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, str(PROCS), *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _claimed(run_dir: Path) -> bool:
    """True once an explorer has written the taskset's first claims state."""
    from rfthpc.tasks.claims import read_state, shard_journal

    return read_state(shard_journal(run_dir, "ts", 0))[1] is not None


def _wait_for(what: str, cond, procs: list[subprocess.Popen], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        for p in procs:
            if p.poll() not in (None, 0):
                pytest.fail(f"{p.args[2]} exited {p.returncode} while waiting for {what}: {p.stderr.read().decode()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _finish(p: subprocess.Popen) -> None:
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"{p.args[2:4]} did not exit")
    assert p.returncode == 0, err.decode()


def _steps(run_dir: Path) -> list[dict]:
    path = run_dir / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _step(run_dir: Path) -> int:
    return (read_json(run_dir / "version.json") or {"step": 0})["step"]


@pytest.mark.slow
def test_run_reaches_total_steps_with_drops_joiners_and_a_trainer_restart(run_dir: Path) -> None:
    """A straggling explorer's first groups arrive stale and are dropped; another explorer joins
    mid-run; the trainer is killed and resumed from its checkpoint. The explorers replace every
    dropped group, and the trainer trains all its steps on distinct groups of distinct tasks."""
    settings = json.dumps({"tasks": 40, "epochs": 1, "steps": 6, "batch": 4, "max_staleness": 1})
    straggler = _start("explorer", str(run_dir), "slow/0", settings, "3")
    _wait_for("the straggler's claims", lambda: _claimed(run_dir), [straggler])
    fast = _start("explorer", str(run_dir), "fast/0", settings)
    trainer = _start("trainer", str(run_dir), settings)
    procs = [straggler, fast, trainer]
    _wait_for("trainer step 2", lambda: _step(run_dir) >= 2, procs)
    joiner = _start("explorer", str(run_dir), "joiner/0", settings)
    procs.append(joiner)
    _wait_for("trainer step 5", lambda: _step(run_dir) >= 5, procs)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    procs.remove(trainer)
    resumed = _start("trainer", str(run_dir), settings)
    for p in [resumed, *procs]:
        _finish(p)

    steps = _steps(run_dir)
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    consumed = [g for s in steps for g in s["groups"]]
    assert len(consumed) == 24
    assert len({gid for gid, *_ in consumed}) == 24, "a group was consumed twice"
    assert len({(epoch, index) for _, epoch, index, _ in consumed}) == 24, "a task was consumed twice"
    assert all(s["step"] - 1 - version <= 1 for s in steps for *_, version in s["groups"])
    # The straggler's first claims (tasks 0 and 1) arrived stale: both dropped, replaced by fresh tasks.
    assert not {(0, 0), (0, 1)} & {(epoch, index) for _, epoch, index, _ in consumed}
    state = read_json(run_dir / "done.json")["state"]
    assert state["counters"]["dropped_stale"] >= 2 and state["lost"]["ts"] >= 2
    status = TaskClaims.read_status(run_dir, "ts")
    assert status is not None and status.refill >= 2 and status.issued == 24 + status.refill
    assert status.outstanding == 0 and status.returned == 0 and not (run_dir / "exhausted.json").exists()


@pytest.mark.slow
def test_run_ends_cleanly_when_the_data_runs_out(run_dir: Path) -> None:
    """With 25 tasks for 24 groups, the straggler's two dropped groups cannot both be replaced: the
    trainer stops after its last full batch, knowing that the epochs are used up."""
    settings = json.dumps({"tasks": 25, "epochs": 1, "steps": 6, "batch": 4, "max_staleness": 1})
    straggler = _start("explorer", str(run_dir), "slow/0", settings, "3")
    _wait_for("the straggler's claims", lambda: _claimed(run_dir), [straggler])
    procs = [straggler, _start("explorer", str(run_dir), "fast/0", settings),
             _start("trainer", str(run_dir), settings)]
    for p in procs:
        _finish(p)
    ended = read_json(run_dir / "exhausted.json")
    assert ended["step"] == 5 and ended["exhausted"] and ended["metrics"]["store/dropped_stale"] >= 2
    assert [s["step"] for s in _steps(run_dir)] == [1, 2, 3, 4, 5]
    status = TaskClaims.read_status(run_dir, "ts")
    assert status is not None and status.issued == 25 and status.exhausted


def test_groups_of_an_unreadable_chunk_are_replaced(run_dir: Path) -> None:
    """A damaged chunk is quarantined and its groups cannot be trained: the claim set the trainer
    consumes hands out fresh tasks in their place, so the trainer still gets its batches."""
    claims = TaskClaims(run_dir, "ts", 10, owner="ex/0", max_tasks=4)
    first = claims.claim(4)
    _commit(run_dir, first[:2], [0, 0])
    _commit(run_dir, first[2:], [0, 0])
    claims.complete(first)
    from rfthpc.store.chunks import read_chunk
    from rfthpc.store.layout import list_chunks

    damaged = sorted(r.path for r in list_chunks(run_dir / "experiences"))[1]
    lost = {g.task_id for g in read_chunk(damaged)[1]}
    damaged.write_bytes(damaged.read_bytes()[:100])
    reader = StoreReader(run_dir, max_staleness=1)
    reader.track_tasksets(["ts"])
    with pytest.raises(StoreTimeout):
        reader.take(4, current_version=0, timeout_s=0.5)
    assert read_losses(run_dir / "experiences") == {"ts": 2}
    more = claims.claim(4)
    assert [c.serial for c in more] == [4, 5]
    _commit(run_dir, more, [0, 0])
    claims.complete(more)
    kept = sorted({"t0", "t1", "t2", "t3"} - lost)
    assert sorted(g.task_id for g in reader.take(4, current_version=0, timeout_s=1)) == [*kept, "t4", "t5"]
