"""The local Slurm cluster of tools/local_slurm.sh does what rfthpc relies on.

Everything here runs against the real cluster: real sbatch, sacct, scancel and submitit. CI calls
`tools/local_slurm.sh up` before pytest; the `slurm_cluster` fixture (tests/conftest.py) calls it
too when the cluster is not healthy, so this module also runs on its own (as root). Every wait on a
Slurm state is bounded.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import submitit

from tests.conftest import SESSION_PID_FILE, cancel, orphaned_jobs, queued_jobs

#: How long any one job may take to reach the state a test waits for; jobs here take ~1 s.
JOB_TIMEOUT_S = 30.0
TERMINAL_STATES = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; bounded so a hung Slurm command fails the test."""
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=60)


@pytest.fixture(autouse=True)
def cluster(slurm_cluster: None) -> None:
    """Every test here runs on the local cluster (tests/conftest.py brings it up)."""


def sbatch(*args: str) -> str:
    """Submit with `sbatch --parsable` and return the job id."""
    out = run("sbatch", "--parsable", *args).stdout.strip()
    return out.split(";")[0]


def sacct_rows(job_id: str) -> dict[str, dict[str, str]]:
    """Allocation rows of a job from accounting: sub-id → {State, NodeList, AllocTRES}.

    Sub-ids are `123`, `123_0` (array task) or `123+0` (hetjob component). A state such as
    `CANCELLED by 0` is reduced to its first word.
    """
    fields = ["JobID", "State", "NodeList", "AllocTRES"]
    out = run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", ",".join(fields)).stdout
    rows = {}
    for line in out.splitlines():
        values = dict(zip(fields, line.split("|")))
        values["State"] = values["State"].split()[0]
        rows[values.pop("JobID")] = values
    return rows


def wait_until_done(job_id: str, n_rows: int = 1) -> dict[str, dict[str, str]]:
    """Poll sacct until the job shows `n_rows` allocation rows, all in a terminal state."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    rows: dict[str, dict[str, str]] = {}
    while time.monotonic() < deadline:
        rows = sacct_rows(job_id)
        if len(rows) == n_rows and all(r["State"] in TERMINAL_STATES for r in rows.values()):
            return rows
        time.sleep(0.2)
    run("scancel", job_id, check=False)
    pytest.fail(f"job {job_id} not done after {JOB_TIMEOUT_S} s; last sacct rows: {rows}")


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body)
    return path


def test_batch_job_completes(tmp_path: Path) -> None:
    script = write_script(tmp_path / "job.sh", 'echo "ran $SLURM_JOB_ID on $SLURMD_NODENAME"\n')
    job_id = sbatch("--output", str(tmp_path / "%j.out"), str(script))

    rows = wait_until_done(job_id)

    assert rows[job_id]["State"] == "COMPLETED"
    node = rows[job_id]["NodeList"]
    assert node in {"n1", "n2"}
    assert (tmp_path / f"{job_id}.out").read_text() == f"ran {job_id} on {node}\n"


def test_array_runs_every_task(tmp_path: Path) -> None:
    script = write_script(tmp_path / "array.sh", "echo task=$SLURM_ARRAY_TASK_ID\n")
    job_id = sbatch("--array=0-1", "--output", str(tmp_path / "%A_%a.out"), str(script))

    rows = wait_until_done(job_id, n_rows=2)

    assert {sub: r["State"] for sub, r in rows.items()} == {
        f"{job_id}_0": "COMPLETED",
        f"{job_id}_1": "COMPLETED",
    }
    for task in (0, 1):
        assert (tmp_path / f"{job_id}_{task}.out").read_text() == f"task={task}\n"


def test_hetjob_gets_one_node_per_component(tmp_path: Path) -> None:
    # Each component runs a step on its own allocation; SLURMD_NODENAME names the virtual node.
    script = write_script(
        tmp_path / "het.sh",
        "#SBATCH -N1 -n1\n"
        "#SBATCH hetjob\n"
        "#SBATCH -N1 -n1\n"
        "srun --het-group=0 printenv SLURMD_NODENAME\n"
        "srun --het-group=1 printenv SLURMD_NODENAME\n",
    )
    job_id = sbatch("--output", str(tmp_path / "%j.out"), str(script))

    rows = wait_until_done(job_id, n_rows=2)

    assert rows[f"{job_id}+0"]["State"] == rows[f"{job_id}+1"]["State"] == "COMPLETED"
    nodes = [rows[f"{job_id}+{c}"]["NodeList"] for c in (0, 1)]
    assert len(set(nodes)) == 2  # one node per component
    assert (tmp_path / f"{job_id}.out").read_text().split() == nodes


def test_gres_gpu_sets_cuda_visible_devices(tmp_path: Path) -> None:
    script = write_script(tmp_path / "gpu.sh", "echo $CUDA_VISIBLE_DEVICES\n")
    job_id = sbatch("--gres=gpu:2", "--output", str(tmp_path / "%j.out"), str(script))

    rows = wait_until_done(job_id)

    assert rows[job_id]["State"] == "COMPLETED"
    assert "gres/gpu=2" in rows[job_id]["AllocTRES"]
    devices = (tmp_path / f"{job_id}.out").read_text().strip().split(",")
    assert len(set(devices)) == 2
    assert all(d.isdigit() and int(d) < 4 for d in devices)


def test_cancelled_job_shows_cancelled(tmp_path: Path) -> None:
    job_id = sbatch("--output", str(tmp_path / "%j.out"), "--wrap", "sleep 300")
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while sacct_rows(job_id).get(job_id, {}).get("State") != "RUNNING":
            assert time.monotonic() < deadline, f"job {job_id} never started running"
            time.sleep(0.2)
        run("scancel", job_id)

        rows = wait_until_done(job_id)
    finally:
        run("scancel", job_id, check=False)

    assert rows[job_id]["State"] == "CANCELLED"


def test_accounts_and_partitions(tmp_path: Path) -> None:
    """`other` account and partition are accepted; unknown ones are rejected at submit."""
    out = ["--output", str(tmp_path / "%j.out"), "--wrap", "true"]
    job_id = sbatch("--account=other", "--partition=other", *out)
    rows = wait_until_done(job_id)
    assert rows[job_id]["State"] == "COMPLETED"
    assert rows[job_id]["NodeList"] == "n2"  # the only node of partition `other`

    bad_account = run("sbatch", "--account=no-such-account", *out, check=False)
    assert bad_account.returncode != 0
    assert "Invalid account" in bad_account.stderr
    bad_partition = run("sbatch", "--partition=no-such-partition", *out, check=False)
    assert bad_partition.returncode != 0
    assert "invalid partition" in bad_partition.stderr.lower()


def test_submitit_runs_a_function(tmp_path: Path) -> None:
    def multiply_in_job(a: int, b: int) -> tuple[int, str]:
        return a * b, os.environ["SLURM_JOB_ID"]

    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    executor.update_parameters(timeout_min=2, slurm_partition="debug", cpus_per_task=1, mem_gb=1)
    job = executor.submit(multiply_in_job, 6, 7)
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not job.done():
            assert time.monotonic() < deadline, f"submitit job {job.job_id} not done: {job.state}"
            time.sleep(0.2)
    finally:
        job.cancel(check=False)

    assert job.result() == (42, job.job_id)


def test_jobs_of_dead_test_sessions_are_cancelled(tmp_path: Path) -> None:
    """Jobs writing into the base directory of a pytest session that is gone are cancelled; those of a
    live session (known by our pid record or by pytest's own `.lock`), of this session and of
    anything else are not. A pid recorded before its process started was reused: that session is gone."""
    root = tmp_path / "pytest-of-tester"
    dead, reused, live, live_lock, ours = (root / f"pytest-{n}" for n in range(1, 6))
    other = tmp_path / "elsewhere"
    for folder in (dead, reused, live, live_lock, ours, other):
        (folder / "log").mkdir(parents=True)
    ended = subprocess.Popen(["true"])
    ended.wait()
    (dead / SESSION_PID_FILE).write_text(str(ended.pid))
    (dead / ".lock").write_text(str(ended.pid))
    (reused / ".lock").write_text(str(os.getpid()))
    long_ago = time.time() - 86400
    os.utime(reused / ".lock", (long_ago, long_ago))
    (live / SESSION_PID_FILE).write_text(str(os.getpid()))
    (live_lock / ".lock").write_text(str(os.getpid()))
    sleep = write_script(tmp_path / "sleep.sh", "sleep 300\n")
    limits = ["--time=5", "--mem=50M"]
    orphans = [sbatch(*limits, "--output", str(dead / "log" / "%j.out"), str(sleep)),
               sbatch(*limits, "--array=0-1", "--output", str(dead / "log" / "%A_%a.out"), str(sleep)),
               sbatch(*limits, "--output", str(reused / "log" / "%j.out"), str(sleep))]
    kept = [sbatch(*limits, "--output", str(folder / "log" / "%j.out"), str(sleep))
            for folder in (live, live_lock, ours, other)]
    try:
        assert sorted(orphaned_jobs(ours, queued_jobs())) == sorted(orphans)
        cancel(*orphans)
        assert {row["State"] for job in orphans for row in sacct_rows(job).values()} == {"CANCELLED"}
        assert sorted(run("squeue", "-h", "-j", ",".join(kept), "-o", "%i").stdout.split()) == sorted(kept)
    finally:
        run("scancel", *orphans, *kept, check=False)
