"""Preemption: SIGUSR2 (Slurm's warning before the time limit) or SIGTERM while the explorer holds
claims makes it commit finished groups, release the rest and exit 124 (the real command, in its
own process)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rfthpc.errors import EXIT_PREEMPTED
from rfthpc.signals import StopRequest
from tests.explorer_loop.conftest import claims_state, groups, make_run, progress, taskset, write_jsonl
from tests.explorer_loop.procs import finish, start_explorer, wait_for


def test_both_stop_signals_are_recorded() -> None:
    stop = StopRequest().install()
    try:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop.reason == "SIGUSR2"
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.reason == "SIGUSR2", "the first request wins"
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.slow
def test_stop_signal_commits_releases_and_exits_124(tmp_path: Path, tiny_model: Path, questions) -> None:
    sig = signal.SIGTERM
    data = write_jsonl(tmp_path / "train.jsonl", questions[:4])
    # Lock-step: the second batch needs the trainer's step-1 weights, which never come.
    run = make_run(tmp_path, tiny_model, [taskset("arith", data)], buffer={"batch_size": 2, "total_steps": 2},
                   synchronizer={"sync_interval": 1, "sync_offset": 0})
    log = tmp_path / "explorer.log"
    proc = start_explorer(run, log)
    wait_for(lambda: progress(run).get("state") == "waiting_for_weights", proc, log)
    assert progress(run)["need_version"] == 1
    proc.send_signal(sig)
    assert finish(proc, log) == EXIT_PREEMPTED, log.read_text()[-3000:]
    state = claims_state(run, "arith")
    assert state["completed"] == 2 and state["outstanding"] == {}
    assert sorted(serial for _, _, serial in state["returned"]) == [2, 3]
    assert sorted(g.task_id for g in groups(run)) == ["arith/0", "arith/1"]
    assert all(g.policy_version == 0 for g in groups(run))
    assert progress(run)["state"] == "stopped"
    assert not (run / "weights" / ".readers" / "explorer-0.json").exists()
    assert signal.Signals(sig).name in log.read_text()
