"""`rfthpc status` and `rfthpc cancel` on run directories in known states (no jobs need to run)."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from rfthpc.errors import UserError
from rfthpc.launch.cancel import select_jobs
from rfthpc.launch.job_states import TaskState, query_states
from rfthpc.observe.status import collect_status, format_status, judge_liveness
from rfthpc.rundir.jobs import JobRecord, read_jobs, record_job
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import write_json_atomic
from rfthpc.weights.published import point_latest
from tests.conftest import cancel
from tests.launch.conftest import rfthpc, run_cmd, wait_terminal
from tests.records import write_trainer_report


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    """A run directory with a config, a trainer at step 7 and two explorer ranks reporting."""
    rd = RunDir(tmp_path / "run").create()
    rd.config.write_text("mode: both\n")
    now = time.time()
    write_trainer_report(rd, {"step": 7, "stage": "rft", "stage_index": 0, "stage_start_step": 0,
                              "published_version": 7, "done": False, "updated": now - 3})
    point_latest(rd.root, 7)
    rd.latest_checkpoint_file.write_text("6\n")
    for rank, version in ((0, 7), (1, 5)):
        write_json_atomic(rd.root / "explorer_meta" / "explorer" / f"{rank}.json", {
            "name": "explorer", "rank": rank, "state": "exploring", "version": version, "groups_committed": 10 + rank,
            "tokens_per_s": 123.4, "weight_stall_s": 0.031, "weight_load_s": 0.52, "weight_read_mb": 6.0,
            "weight_checksum_failures": rank, "groups_filtered": 2 + rank, "updated": now - 1})
    return rd


def test_jobs_file_round_trip_skips_a_torn_line(run: RunDir) -> None:
    record_job(run, JobRecord("trainer", "11", trainer_nodes=2))
    record_job(run, JobRecord("explorer", "12", explorer="explorer", array_size=4))
    with open(run.jobs, "a") as f:
        f.write('{"role": "explorer", "job_id": "1')
    assert [(r.role, r.job_id, r.array_size) for r in read_jobs(run)] == [("trainer", "11", 0), ("explorer", "12", 4)]


def _append_many(root: str, writer: int) -> None:
    for i in range(25):
        record_job(RunDir(root), JobRecord("explorer", f"{writer}{i:03d}", explorer=f"w{writer}" + "x" * 500))


def test_concurrent_submitters_append_whole_lines(run: RunDir) -> None:
    """Four submitters appending at once (add-explorers while an async pair is submitted): no torn line."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(run.root), w)) for w in range(1, 5)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    records = read_jobs(run)
    assert len(records) == 100 and len(run.jobs.read_text().splitlines()) == 100
    assert sorted(r.job_id for r in records) == sorted(f"{w}{i:03d}" for w in range(1, 5) for i in range(25))


def test_status_report(run: RunDir) -> None:
    record_job(run, JobRecord("trainer", "11", trainer_nodes=1))
    status = collect_status(run.root)
    status["jobs"][0]["tasks"] = [TaskState("11", "RUNNING", "00:05:00", "n1")]
    status["slurm_error"] = None
    text = format_status(status)
    assert "trainer  11   RUNNING  00:05:00  n1" in text
    assert re.search(r"trainer: step 7 \(stage rft\), published version 7, checkpoint 6, updated \d+ s ago", text)
    rows = [line.split() for line in text.splitlines() if line.strip().startswith("explorer  ")][1:]
    # explorer, rank, state, version, staleness (latest 7 - version), groups, tokens/s, sync stall ms, sync load s,
    # sync MB read, ...
    assert [r[:10] for r in rows] == [
        ["explorer", "0", "exploring", "7", "0", "10", "123.40", "31.00", "0.52", "6.00"],
        ["explorer", "1", "exploring", "5", "2", "11", "123.40", "31.00", "0.52", "6.00"]]
    assert "weights: 1 published file(s) failed their checksums" in text
    assert "dynamic sampling: 5 group(s) whose responses all scored the same were not committed" in text
    assert "time, over" not in text  # no step recorded yet


def _explorer_rows(text: str) -> list[list[str]]:
    """The rows of the explorers table (after its header)."""
    table = text.split("\nexplorers (", 1)[1]
    return [line.split() for line in table.splitlines() if line.strip().startswith("explorer  ")][1:]


def test_status_leaves_ranks_that_are_gone_out_of_the_live_figures(run: RunDir) -> None:
    """A rank whose Slurm task was cancelled, one whose process on this host ended (`rfthpc run`) and one
    that missed its heartbeats for a lease show why they are gone, with no staleness or speed; a rank
    that stopped cleanly shows `stopped`; the trainer of a cancelled job shows it too."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    now = time.time()
    host = __import__("socket").gethostname()
    records = {0: {"state": "exploring", "updated": now - 1},                      # its job was cancelled
               1: {"state": "waiting_for_weights", "updated": now - 1, "host": host,
                   "pid": int(dead.stdout)},                                      # its process ended
               2: {"state": "exploring", "updated": now - 400, "lease_s": 300},  # silent for a lease
               3: {"state": "stopped", "updated": now - 50},
               4: {"state": "exploring", "updated": now - 2, "host": host, "pid": os.getpid()}}
    for rank, extra in records.items():
        write_json_atomic(run.root / "explorer_meta" / "explorer" / f"{rank}.json",
                          {"name": "explorer", "rank": rank, "version": 5, "tokens_per_s": 99.0, **extra})
    record_job(run, JobRecord("trainer", "11", trainer_nodes=1))
    record_job(run, JobRecord("explorer", "12", explorer="explorer", array_size=5))
    status = collect_status(run.root, timeout_s=5)
    status["jobs"][0]["tasks"] = [TaskState("11", "CANCELLED")]
    status["jobs"][1]["tasks"] = [TaskState("12_0", "CANCELLED"), *(TaskState(f"12_{k}", "RUNNING")
                                                                      for k in range(1, 5))]
    status["slurm_error"] = None
    judge_liveness(status)
    text = format_status(status)
    assert "— gone: job 11 CANCELLED" in text
    rows = {int(r[1]): " ".join(r[2:]) for r in _explorer_rows(text)}
    assert rows[0].startswith("gone: job 12_0 CANCELLED (was exploring) 5 - ")
    assert rows[1].startswith(f"gone: process {int(dead.stdout)} ended (was waiting_for_weights) 5 - ")
    assert re.match(r"gone: no heartbeat for 40\d s \(lease 300 s\) \(was exploring\) 5 - ", rows[2])
    assert rows[3].startswith("stopped 5 - ")
    assert rows[4].startswith("exploring 5 2 ") and "99.00" in rows[4]


def test_status_says_what_each_role_spends_its_time_on(run: RunDir) -> None:
    now = time.time()
    run.monitor.mkdir(parents=True, exist_ok=True)
    with open(run.monitor / "trainer.jsonl", "w") as f:
        f.writelines(json.dumps({"step": k + 1, "time": now - 10 + 3 * k, "timing/wait_experience_s": 1.0,
                                 "timing/compute_s": 1.5, "timing/publish_s": 0.5, "timing/checkpoint_s": 0.0})
                     + "\n" for k in range(3))
    with open(run.monitor / "explorer_explorer_0.jsonl", "w") as f:
        f.write(json.dumps({"step": 1, "time": now - 2, "rollout/wait_s": 1.0, "rollout/time_s": 3.0}) + "\n")
    text = format_status(collect_status(run.root, timeout_s=5))
    assert "  trainer: computing 50%, waiting for experience 33%, publishing weights 17%" in text
    assert "  explorer rank 0: generating 75%, waiting for weights 25%" in text


def test_status_without_slurm_still_reports_the_run(run: RunDir, tmp_path: Path) -> None:
    record_job(run, JobRecord("explorer", "12", explorer="explorer", array_size=2))
    out = rfthpc("status", str(run.root), env={"PATH": str(tmp_path / "empty")}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Slurm did not answer" in out.stdout and "UNKNOWN" in out.stdout and "trainer: step 7" in out.stdout
    as_json = json.loads(rfthpc("status", str(run.root), "--json", env={"PATH": str(tmp_path / "empty")}).stdout)
    assert as_json["trainer"]["step"] == 7 and as_json["latest_weights"] == 7


def test_status_of_a_directory_that_is_no_run(tmp_path: Path) -> None:
    out = rfthpc("status", str(tmp_path))
    assert out.returncode == 2 and "is not a run directory" in out.stderr


def test_cancel_selection() -> None:
    records = [JobRecord("hetjob", "20", explorer="explorer", array_size=2, trainer_nodes=1),
               JobRecord("explorer", "21", explorer="explorer_new", array_size=1)]
    assert [r.job_id for r in select_jobs(records, "trainer", None)] == ["20"]
    assert [r.job_id for r in select_jobs(records, "explorer", "explorer_new")] == ["21"]
    assert [r.job_id for r in select_jobs(records, "all", None)] == ["20", "21"]
    with pytest.raises(UserError, match="heterogeneous job 20 together with the trainer"):
        select_jobs(records, "explorer", "explorer")
    with pytest.raises(UserError, match="no explorer array named 'nope'.*explorer, explorer_new"):
        select_jobs(records, "explorer", "nope")


@pytest.mark.slurm
def test_states_of_real_jobs(slurm_cluster: None, tmp_path: Path) -> None:
    """sacct states of a finished and a cancelled job; a cancel of finished jobs cancels nothing."""
    done = run_cmd("sbatch", "--parsable", f"--output={tmp_path}/%j.out", "--wrap", "true").stdout.strip()
    queued = run_cmd("sbatch", "--parsable", f"--output={tmp_path}/%j.out", "--begin=now+1hour",
                     "--wrap", "true").stdout.strip()
    run_cmd("scancel", queued)
    wait_terminal(done, 60)
    wait_terminal(queued, 60)
    states, error = query_states([done, queued])
    assert error is None
    assert [t.state for t in states[done]] == ["COMPLETED"] and [t.state for t in states[queued]] == ["CANCELLED"]
    rd = RunDir(tmp_path / "run").create()
    record_job(rd, JobRecord("trainer", done))
    out = rfthpc("cancel", str(rd.root))
    assert out.returncode == 0 and "nothing to cancel" in out.stdout


@pytest.mark.slurm
def test_states_come_from_squeue_while_the_accounting_database_is_down(
    slurm_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurmdbd unreachable (sacct: connection refused) but slurmctld up: queued jobs get their squeue
    state instead of every job showing as unknown with the controller blamed."""
    done = run_cmd("sbatch", "--parsable", f"--output={tmp_path}/%j.out", "--wrap", "true").stdout.strip()
    queued = run_cmd("sbatch", "--parsable", f"--output={tmp_path}/%j.out", "--begin=now+1hour",
                     "--wrap", "true").stdout.strip()
    try:
        wait_terminal(done, 60)
        # The same cluster seen through a config whose accounting port nothing listens on.
        conf = tmp_path / "etc"
        shutil.copytree("/etc/slurm", conf)
        text = (conf / "slurm.conf").read_text()
        (conf / "slurm.conf").write_text(re.sub(r"(?m)^AccountingStoragePort=.*$", "AccountingStoragePort=9", text))
        monkeypatch.setenv("SLURM_CONF", str(conf / "slurm.conf"))
        states, error = query_states([done, queued])
    finally:
        cancel(queued)
    assert error is None
    assert [t.state for t in states[queued]] == ["PENDING"]
    (gone,) = states[done]
    assert gone.state == "GONE" and "sacct:" in gone.reason and "onnection refused" in gone.reason
