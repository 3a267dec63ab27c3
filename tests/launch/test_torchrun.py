"""srun + torchrun across two virtual nodes: rendezvous from Slurm's environment, gloo all-reduce."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rfthpc.launch.executors import RunExecutor
from rfthpc.launch.torchrun import SHUTDOWN_TIMEOUT_VAR, rendezvous_from_slurm, torchrun_argv, torchrun_env
from tests.conftest import cancel
from tests.launch.conftest import PYTHON, REPO, wait_terminal

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(240)]


def run_node(out_dir: str) -> int:
    """One srun task (= one node): torchrun with the rendezvous derived from the Slurm environment."""
    rdzv = rendezvous_from_slurm(os.environ)
    argv = torchrun_argv(PYTHON, rdzv, 1, ["tests.launch.dist_check", out_dir])
    return subprocess.run(argv, cwd=REPO, timeout=150, check=False).returncode


def test_two_node_rendezvous(slurm_cluster: None, tmp_path: Path) -> None:
    out = tmp_path / "ranks"
    out.mkdir()
    ex = RunExecutor(tmp_path / "log", python=PYTHON)
    ex.update_parameters(nodes=2, ntasks_per_node=1, cpus_per_task=1, mem="1G", time=5,
                         job_name="rfthpc-test-torchrun", stderr_to_stdout=True)
    job = ex.submit(run_node, str(out))
    try:
        states = wait_terminal(job.job_id, timeout=180)
    finally:
        cancel(job.job_id)
    log = "\n".join(p.read_text() for p in sorted((tmp_path / "log").glob("*_log.out")))
    assert states[job.job_id] == "COMPLETED", log
    assert job.results() == [0, 0]
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    assert [r["world"] for r in ranks] == [2, 2]
    assert [r["sum"] for r in ranks] == [3.0, 3.0]  # (0 + 1) + (1 + 1)
    assert len({r["node"] for r in ranks}) == 2  # one rank per virtual node


@pytest.mark.parametrize("timeout_s", ["1", None])
def test_torchrun_lets_ranks_finish_their_checkpoint_after_sigterm(tmp_path: Path, timeout_s: str | None) -> None:
    """With the environment rfthpc gives torchrun, a rank that takes a while to save after SIGTERM is
    not SIGKILLed by torchrun (a 1 s shutdown timeout shows that it would be)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(SHUTDOWN_TIMEOUT_VAR, None)
    env = torchrun_env(env) if timeout_s is None else {**env, SHUTDOWN_TIMEOUT_VAR: timeout_s}
    marker = tmp_path / "rank0"
    proc = subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                             "-m", "tests.launch.slow_stop", str(marker)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not marker.with_suffix(".ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the rank did not start"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert marker.exists() == (timeout_s is None)


def test_the_job_wrapper_reports_torchrun_stopped_by_sigterm_as_a_stop(tmp_path: Path) -> None:
    """Slurm's SIGTERM (scancel, requeue, preemption) reaches the job callable, torchrun and its ranks;
    the ranks save and exit, torchrun then exits 1 anyway: the callable reports a stop, not a crash
    of the trainer."""
    marker = tmp_path / "rank"
    proc = subprocess.Popen([PYTHON, "-m", "tests.launch.wrapper_stop", str(marker)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.with_suffix(".ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        time.sleep(0.5)  # both ranks up
        os.killpg(proc.pid, signal.SIGTERM)  # as Slurm signals every process of the step
        out, err = proc.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert marker.read_text() == "saved", err
    assert "returned: trainer 0 stopped" in out, err
