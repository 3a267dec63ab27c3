"""A multi-node trainer that trains, saves and ends ends COMPLETED on every node, run after run, under load.

The trainer's ranks used to race at exit: a rank whose gloo worker thread dropped a finished
collective while the interpreter finalized aborted (SIGABRT) after a successful run, its node's
torchrun failed, and the whole job ended FAILED. It happened in about one run in five when the
machine was busy, so each test runs the job several times in a row with two busy loops loading
the machine, and checks every run, every node.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rfthpc.rundir.jobs import read_jobs
from rfthpc.rundir.paths import RunDir
from tests.conftest import cancel
from tests.launch.conftest import (
    cluster_report,
    rfthpc,
    sacct_states,
    tiny_config,
    wait_terminal,
    write_yaml,
)
from tests.launch.runcheck import log_tails
from tests.trainer.conftest import write_groups

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(1800)]

STEPS = 2
GROUPS_PER_STEP = 4


@pytest.fixture
def busy_machine() -> Iterator[None]:
    """Two busy loops, one per core of the test machine, for the test's duration."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


def train_once(demo_data: Path, root: Path, name: str, nodes: int) -> None:
    """Submit a trainer-only run on `nodes` nodes with its experience already written; check it ends
    COMPLETED, every step of it and every node's torchrun."""
    cfg = write_yaml(root / f"{name}.yaml", tiny_config(
        demo_data, root / "runs", name, mode="train", buffer={"total_steps": STEPS},
        slurm={"trainer": {"nodes": nodes}}))
    out = rfthpc("submit", "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    run = Path(out.stdout.split("run directory ", 1)[1].splitlines()[0].strip())
    (job_id,) = [r.job_id for r in read_jobs(RunDir(run))]
    try:
        write_groups(RunDir(run), STEPS * GROUPS_PER_STEP, repeat=4, explorer="explorer")
        states = wait_terminal(job_id, 600)
        assert states == {job_id: "COMPLETED"}, f"{states}\n{log_tails(run)}\n{cluster_report()}"
    finally:
        cancel(job_id)
    steps = sacct_states(job_id, steps=True)
    assert set(steps.values()) == {"COMPLETED"}, f"{steps}\n{log_tails(run)}"
    for node in range(nodes):
        log = (run / "log" / f"{job_id}_{node}_log.out").read_text()
        assert f"trainer {node} exited with code 0" in log, log[-3000:]
    assert (run / f"global_step_{STEPS}").is_dir()


@pytest.mark.parametrize(("nodes", "runs"), [(2, 5), (3, 2)])
def test_multinode_trainer_ends_completed_run_after_run(slurm_cluster: None, demo_data: Path, tmp_path: Path,
                                                        busy_machine: None, nodes: int, runs: int) -> None:
    for i in range(runs):
        train_once(demo_data, tmp_path, f"{nodes}nodes-{i}", nodes)
