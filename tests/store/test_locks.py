"""Run-directory locks: every kind excludes across processes; a dead holder's lock is recovered."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rfthpc.errors import ConfigError
from rfthpc.sharedfs import fileops as fsutil
from rfthpc.sharedfs.locks import LOCK_KINDS, LockTimeout, make_lock

PROCS = Path(__file__).with_name("lockprocs.py")
REPO = Path(__file__).parents[2]


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(PROCS), *args], env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, text=True)


def _holding(lock: Path, kind: str) -> subprocess.Popen:
    p = _spawn("holder", str(lock), kind)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


@pytest.mark.parametrize("kind", LOCK_KINDS)
def test_every_kind_excludes_other_processes(kind: str, tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    procs = [_spawn("incrementer", str(tmp_path / "x.lock"), kind, str(counter), "20") for _ in range(3)]
    for p in procs:
        assert p.wait(timeout=60) == 0
    assert counter.read_text() == "60"


@pytest.mark.parametrize("kind", LOCK_KINDS)
def test_lock_of_a_killed_holder_is_recovered(kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lock = tmp_path / "x.lock"
    p = _holding(lock, kind)
    p.send_signal(signal.SIGKILL)
    p.wait()
    t = time.monotonic()
    with caplog.at_level(logging.WARNING), make_lock(lock, kind, timeout_s=10, stale_s=300):
        pass
    assert time.monotonic() - t < 5
    if kind in ("link", "strict-soft", "soft"):  # flock/lockf: the kernel released it, nothing to break
        assert f"breaking lock {lock}" in caplog.text and f"pid {p.pid}" in caplog.text
        assert "which has exited" in caplog.text


@pytest.mark.parametrize("kind", ["flock", "lockf"])
def test_a_shared_runs_lock_file_is_group_writable(kind: str, tmp_path: Path) -> None:
    """flock/lockf lock files stay in place: in a run shared with a group, the group must open them too."""
    fsutil.set_share_group(fsutil.grp.getgrgid(os.getgid()).gr_name)
    try:
        with make_lock(tmp_path / "x.lock", kind, timeout_s=10):
            assert (tmp_path / "x.lock").stat().st_mode & 0o777 == 0o660
    finally:
        fsutil.set_share_group(None)


@pytest.mark.parametrize("kind", ["link", "strict-soft", "soft"])
def test_marker_unchanged_for_stale_s_is_broken(kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A stopped holder looks like one on an unreachable node: alive as far as this host knows.
    lock = tmp_path / "x.lock"
    p = _holding(lock, kind)
    p.send_signal(signal.SIGSTOP)
    try:
        with caplog.at_level(logging.WARNING), make_lock(lock, kind, timeout_s=10, stale_s=0.5):
            assert "unchanged for" in caplog.text and f"pid {p.pid}" in caplog.text
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("kind", ["link", "strict-soft", "soft"])
def test_a_waiter_that_stalled_itself_watches_the_holder_afresh(kind: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem outage freezes holder and waiter alike: the waiter's own stall (6 s here, injected
    into its first pause) does not count toward the holder's stale_s (3 s)."""
    from rfthpc.sharedfs import locks

    lock = tmp_path / "x.lock"
    p = _holding(lock, kind)
    p.send_signal(signal.SIGSTOP)
    real_sleep, stalls = time.sleep, [6.0]
    monkeypatch.setattr(locks.time, "sleep", lambda s: real_sleep(stalls.pop() if stalls else s))
    try:
        t = time.monotonic()
        with make_lock(lock, kind, timeout_s=30, stale_s=3):
            broken_after = time.monotonic() - t
    finally:
        p.kill()
        p.wait()
    assert broken_after >= 6 + 3  # the stall, then a fresh stale_s of watching


@pytest.mark.parametrize("kind", LOCK_KINDS)
def test_live_holder_makes_others_time_out_with_a_clear_message(kind: str, tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    p = _holding(lock, kind)
    try:
        with (
            pytest.raises(LockTimeout, match=rf"lock {lock} \({kind}\) not acquired within 0 s"),
            make_lock(lock, kind, timeout_s=0.3, stale_s=60),
        ):
            pass
    finally:
        p.kill()
        p.wait()


def test_unknown_kind_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lock kind 'nfs' is unknown; use one of link, strict-soft, soft, flock, lockf"):
        make_lock(tmp_path / "x.lock", "nfs")  # type: ignore[arg-type]
