"""Heterogeneous jobs through submitit (`HetjobExecutor`) on the local cluster's virtual nodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rfthpc.launch.hetjob import HetjobExecutor, HetjobInfoWatcher
from rfthpc.launch.submitit_jobs import RoleJob
from tests.conftest import cancel
from tests.launch.conftest import PYTHON, wait_terminal

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]


def where_am_i() -> dict[str, object]:
    """What one task of the hetjob sees: its global rank, its node, and the role RoleJob gives it."""
    role = RoleJob("/run", "hetjob", PYTHON, max_requeues=1, explorer="explorer", trainer_nodes=1)
    return {
        "procid": int(os.environ["SLURM_PROCID"]),
        "job_id": os.environ["SLURM_JOB_ID"],
        "role": role.task_role(os.environ),
        "command": role.command(os.environ)[3:4],
    }


def test_hetjob_runs_one_callable_across_components(slurm_cluster: None, tmp_path: Path) -> None:
    ex = HetjobExecutor(tmp_path / "log", [{"additional_parameters": {"ntasks": 2}, "mem_per_cpu": "300M",
                                             "cpus_per_task": 1, "nodes": "1-2", "time": 5}], python=PYTHON)
    ex.update_parameters(nodes=1, ntasks_per_node=1, cpus_per_task=1, mem_per_cpu="300M", time=5,
                         job_name="rfthpc-test-hetjob", stderr_to_stdout=True)
    script = ex.render()
    assert script.count("#SBATCH hetjob") == 1 and "--het-group=0-1" in script
    job = ex.submit(where_am_i)
    try:
        states = wait_terminal(job.job_id, timeout=90, n_rows=2)
    finally:
        cancel(job.job_id)
    assert set(states) == {f"{job.job_id}+0", f"{job.job_id}+1"}
    assert set(states.values()) == {"COMPLETED"}, states
    assert job.num_tasks == 3
    results = sorted(job.results(), key=lambda r: r["procid"])
    assert [r["role"] for r in results] == [("trainer", 0), ("explorer", 0), ("explorer", 1)]
    assert [r["command"] for r in results] == [["train"], ["explore"], ["explore"]]
    # One job id (the leader's) in every task: that is how each task finds the pickled callable.
    assert {r["job_id"] for r in results} == {job.job_id}
    assert job.state == "COMPLETED"


def test_watcher_reads_the_leader_component() -> None:
    sacct = "JobID|State|NodeList\n41+0|RUNNING|n1\n41+1|PENDING|n2\n"
    info = HetjobInfoWatcher().read_info(sacct)
    assert info["41"]["State"] == "RUNNING" and info["41+1"]["State"] == "PENDING"


def test_a_hetjob_requeues_only_after_its_explorer_tasks_stopped(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """On a warning every task stops; the first (trainer) task requeues the whole job, which would end
    explorer tasks still releasing their claims: it waits until each has said it stopped."""
    import threading
    import time

    from rfthpc.launch import submitit_jobs

    job = RoleJob(str(tmp_path), "hetjob", PYTHON, max_requeues=3, explorer="explorer", trainer_nodes=1)
    env = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"}
    requeued_at: list[float] = []

    def stop_explorers() -> None:
        for rank in (1, 2):
            time.sleep(0.7)
            job._mark_stopped({**env, "SLURM_PROCID": str(rank)})

    start = time.monotonic()
    threading.Thread(target=stop_explorers).start()
    said = job._requeue({**env, "SLURM_PROCID": "0"}, "trainer", 0,
                        lambda signum, frame: requeued_at.append(time.monotonic() - start), step_tasks=3)
    assert said == "trainer 0 requeued" and requeued_at[0] >= 1.4  # after the second explorer stopped
    assert not (tmp_path / "slurm" / "stopped").exists() or not any((tmp_path / "slurm" / "stopped").iterdir())
    # An explorer task that never stops (hung) delays the requeue by EXPLORERS_STOP_WAIT_S only.
    monkeypatch.setattr(submitit_jobs, "EXPLORERS_STOP_WAIT_S", 1.0)
    requeued_at.clear()
    start = time.monotonic()
    job._requeue({**env, "SLURM_PROCID": "0"}, "trainer", 0,
                 lambda signum, frame: requeued_at.append(time.monotonic() - start), step_tasks=3)
    assert 1.0 <= requeued_at[0] < 5
