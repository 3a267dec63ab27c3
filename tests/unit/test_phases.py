"""Start-up and shutdown phases (`rfthpc.rundir.phases`): what each process appends, what the run reads back
and the lines `rfthpc run` prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rfthpc.rundir.phases import PhaseLog, process_start_time, read_phases, report


def test_process_start_is_when_this_process_began() -> None:
    # A fresh process reports a start between the moment it was spawned and the moment it answered,
    # however long that took on a busy machine (/proc's clock ticks and uptime: 0.01 s resolution).
    before = time.time()
    out = subprocess.run([sys.executable, "-c", "from rfthpc.rundir.phases import process_start_time as p; "
                          "print(repr(p()))"], capture_output=True, text=True, check=True, timeout=120)
    after = time.time()
    assert before - 0.05 <= float(out.stdout) <= after
    assert process_start_time() <= time.time()


def test_a_phase_is_recorded_once_from_its_first_time(tmp_path: Path) -> None:
    log = PhaseLog(tmp_path, "trainer")
    log.mark("imports", log.start + 2.0)
    log.mark("imports", log.start + 5.0)
    log.mark("first_step", log.start + 7.5)
    lines = [json.loads(ln) for ln in (tmp_path / "monitor" / "phases" / "trainer.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in lines] == ["process_start", "imports", "first_step"]
    assert {r["pid"] for r in lines} == {os.getpid()}
    assert log.seconds() == {"startup/imports_s": 2.0, "startup/first_step_s": 7.5}


def test_a_rank_that_does_not_report_writes_nothing(tmp_path: Path) -> None:
    log = PhaseLog(tmp_path, "trainer", enabled=False)
    log.mark("imports")
    assert not (tmp_path / "monitor").exists() and "imports" in log.times


def test_a_restarted_role_counts_from_its_newest_start(tmp_path: Path) -> None:
    path = tmp_path / "monitor" / "phases" / "explorer_e_0.jsonl"
    path.parent.mkdir(parents=True)
    records = [("process_start", 100.0), ("imports", 101.0), ("engine", 104.0),
               ("process_start", 200.0), ("imports", 201.5)]
    path.write_text("".join(json.dumps({"phase": p, "time": t, "pid": 1}) + "\n" for p, t in records) + '{"pha')
    assert read_phases(tmp_path) == {"explorer_e_0": {"process_start": 200.0, "imports": 201.5}}
    # Processes started before the run being reported are left out.
    assert read_phases(tmp_path, since=300.0) == {}


def test_the_report_measures_start_up_from_the_roles_start_and_shutdown_from_the_last_step() -> None:
    phases = {
        "explorer_e_0": {"process_start": 10.1, "imports": 10.6, "engine": 14.0, "first_batch": 14.3,
                         "final_eval": 91.0, "exit": 91.2},
        "trainer": {"process_start": 10.1, "imports": 14.2, "model": 14.5, "first_weights": 14.6,
                    "first_step": 15.5, "last_step": 90.0, "final_checkpoint": 90.4, "exit": 90.5},
    }
    startup, shutdown = report(phases, roles_started=10.0, returned=92.0)
    assert startup == ("start-up, seconds after the roles started: trainer: imports 4.2, model built 4.5, "
                       "first weights published 4.6, first step 5.5; explorer_e_0: imports 0.6, engine started "
                       "4.0, first batch 4.3")
    assert shutdown == ("shutdown, seconds after the last step: trainer: final checkpoint 0.4, exited 0.5; "
                        "explorer_e_0: final evaluation 1.0, exited 1.2; command returned 2.0")
