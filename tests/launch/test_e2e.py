"""End to end on the local Slurm cluster: tiny CPU runs submitted, watched, preempted, extended, finished.

Each test submits a real run (tiny Qwen2 model, synthetic GSM8K-format data, GRPO, transformers
engine) and waits, bounded, for the trainer to report `done`; then it checks the Slurm states, the
status report, and that every group the trainer took was a distinct task taken once.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from rfthpc.rundir.explorer_meta import read_progress
from rfthpc.rundir.jobs import read_jobs
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import read_json
from tests.conftest import cancel
from tests.launch.conftest import (
    APART,
    PYTHON,
    REPO,
    TERMINAL,
    cluster_report,
    job_nodes,
    rfthpc,
    run_cmd,
    sacct_states,
    scontrol_field,
    tiny_config,
    wait_for,
    wait_terminal,
    write_yaml,
)
from tests.launch.runcheck import check_exactly_once, consumption, log_tails, trainer_steps
from tests.records import trainer_report

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(900)]

RUN_TIMEOUT_S = 420
# How far off its time Slurm may act on a time limit or its warning signal (its timers run about once
# a minute) plus KillWait.
SLURM_TIMER_SLACK_S = 90
# Explorers that stay at most one policy version ahead, so the run's explorers cannot take every
# task before the explorers added mid-run have started. A group that still arrives too stale is
# dropped, and as explorers do exactly total_steps x batch_size tasks, the run may then end a step
# early: counts use the step the trainer reached.
PACED = {"sync_offset": 1, "max_staleness": 1}


def trainer_step(run: Path) -> int:
    """The trainer's last reported step (0 before it reports)."""
    return int((trainer_report(run) or {}).get("step", 0))


def _trainer_gone(trainer_id: str | None) -> bool:
    """True once the trainer's job ended for good (every component terminal and no requeue pending)."""
    if trainer_id is None:
        return False
    states = sacct_states(trainer_id)
    return bool(states) and all(s in TERMINAL for s in states.values()) and not run_cmd(
        "squeue", "-h", "-j", trainer_id).stdout.strip()


def wait_step(run: Path, step: int, trainer_id: str | None = None, timeout: float = RUN_TIMEOUT_S) -> None:
    """Wait until the trainer has done `step` steps; fail at once with the logs if its job ended."""
    def reached() -> bool:
        if trainer_step(run) >= step:
            return True
        if _trainer_gone(trainer_id):
            pytest.fail(f"the trainer job {trainer_id} ended before step {step}\n{log_tails(run)}")
        return False
    try:
        wait_for(reached, timeout, f"trainer step {step} in {run}", interval=2.0)
    except pytest.fail.Exception as e:
        if "timed out" not in str(e):
            raise
        pytest.fail(f"trainer did not reach step {step} within {timeout:.0f} s\n{log_tails(run)}\n{cluster_report()}")


def wait_running(job_id: str, timeout: float = 120) -> None:
    """Wait until every component of a job is RUNNING (explorers added now join a running run)."""
    def running() -> bool:
        states = sacct_states(job_id)
        return bool(states) and set(states.values()) == {"RUNNING"}
    wait_for(running, timeout, f"job {job_id} to run", details=cluster_report)


def wait_done(run: Path, trainer_id: str | None = None, timeout: float = RUN_TIMEOUT_S) -> dict:
    """Wait until the trainer's report says done; return it. Fail at once with the logs if the trainer's job ended."""
    def done() -> dict | None:
        meta = trainer_report(run) or {}
        if meta.get("done"):
            return meta
        if _trainer_gone(trainer_id):
            pytest.fail(f"the trainer job {trainer_id} ended before the run was done\n{log_tails(run)}")
        return None
    try:
        return wait_for(done, timeout, f"the run in {run} to finish", interval=2.0)
    except pytest.fail.Exception as e:
        if "timed out" not in str(e):
            raise
        pytest.fail(f"run did not finish within {timeout:.0f} s\n{log_tails(run)}\n{cluster_report()}")


def groups_of(run: Path, explorer: str) -> int:
    """Groups committed by the explorer rank that committed fewest (0 until every rank reported)."""
    ranks = [read_json(p) or {} for p in sorted((run / "explorer_meta" / explorer).glob("*.json"))]
    return min((int(r.get("groups_committed", 0)) for r in ranks), default=0) if len(ranks) >= 2 else 0


def resumed_steps(run: Path, trainer_id: str) -> list[int]:
    """The global step each start of the trainer began its stage from (from its log)."""
    log = run / "log" / f"{trainer_id}_0_log.out"
    text = log.read_text() if log.exists() else ""
    return [int(line.rsplit("from global step ", 1)[1].split()[0])
            for line in text.splitlines() if "from global step " in line]


def job_ids(run: Path) -> list[str]:
    """Every job id recorded in jobs.jsonl."""
    return [r.job_id for r in read_jobs(RunDir(run))]


def submit(config: Path, *extra: str) -> Path:
    """`rfthpc submit`; return the run directory it printed."""
    out = rfthpc("submit", "--config", str(config), *extra)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.split("run directory ", 1)[1].splitlines()[0].strip())


@pytest.fixture
def runs(shared_dir: Path):
    """A root for run directories on the shared filesystem (each node its own client); every job recorded
    under it is cancelled at the end."""
    root = shared_dir / "runs"
    yield root
    for jobs in root.glob("*/*/jobs.jsonl"):
        cancel(*job_ids(jobs.parent))


def test_submit_runs_trainer_and_explorer_array(slurm_cluster: None, demo_data: Path, runs: Path,
                                                 tmp_path: Path) -> None:
    """A 2-node trainer (srun + torchrun, gloo) and a 2-task explorer array run 4 steps; status shows them.
    The trainer's rank 0 and the explorers run on different nodes, so different clients of the shared
    filesystem the run directory is on."""
    slurm = {"trainer": {"nodes": 2, **APART["trainer"]}, "explorer": APART["explorer"]}
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, runs, "separate", slurm=slurm))
    run = submit(cfg)
    trainer_id, explorer_id = job_ids(run)
    meta = wait_done(run, trainer_id)
    assert meta["step"] == 4
    states = wait_terminal(trainer_id, 120)
    assert states == {trainer_id: "COMPLETED"}, log_tails(run)
    assert wait_terminal(explorer_id, 120, n_rows=2) == {f"{explorer_id}_0": "COMPLETED",
                                                        f"{explorer_id}_1": "COMPLETED"}, log_tails(run)
    trainer_nodes, explorer_nodes = job_nodes(trainer_id), job_nodes(explorer_id)
    assert trainer_nodes[trainer_id][0] == "n1" and len(trainer_nodes[trainer_id]) == 2
    assert {n for nodes in explorer_nodes.values() for n in nodes} <= {"n2", "n3"}, explorer_nodes
    status = rfthpc("status", str(run))
    assert status.returncode == 0, status.stderr
    text = status.stdout
    assert "trainer: step 4" in text and "— done" in text
    assert f"{explorer_id}_0" in text and f"{explorer_id}_1" in text and "COMPLETED" in text
    assert "consumed 16" in text
    assert f"fuse.glusterfs at {runs.parents[2]}" in text
    check_exactly_once(consumption(run), expected_consumed=16)
    # One torchrun per virtual node, each with its own log.
    node_logs = [(run / "log" / f"{trainer_id}_{t}_log.out").read_text() for t in (0, 1)]
    assert all("torch.distributed.run --nnodes 2 --nproc-per-node 1" in log for log in node_logs)
    # Queued jobs run the code snapshot taken at submit, not the working tree.
    assert all(f"code {run}/slurm/code/" in log for log in node_logs)
    as_json = json.loads(rfthpc("status", str(run), "--json").stdout)
    assert as_json["trainer"]["done"] is True and len(as_json["explorers"]["explorer"]) == 2


def test_preemption_cancel_and_requeue_lose_nothing(slurm_cluster: None, demo_data: Path, runs: Path,
                                                    tmp_path: Path) -> None:
    """scancel of an explorer task and USR2 to the other while they explore; USR2 to the trainer, then
    `scontrol requeue` of it after it resumed; wandb on (offline), as the shipped configs have it. The
    trainer and the explorers run on different nodes (different clients of the shared filesystem).

    The run still finishes all its steps; the trainer resumes from its checkpoints; every group it
    took is a distinct task, taken once. Each stop is clean although Slurm's signal also reaches
    wandb's service process: no traceback, the cancelled explorer reports `stopped`, and each role's
    jsonl metrics are whole.
    """
    total = 16
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, runs, "preempt", buffer={"total_steps": total},
                                                      monitor={"monitor_type": ["console", "wandb"],
                                                               "wandb_mode": "offline"}, slurm=APART))
    run = submit(cfg)
    trainer_id, explorer_id = job_ids(run)
    wait_for(lambda: groups_of(run, "explorer") >= 2, RUN_TIMEOUT_S, "both explorers to commit groups")
    assert run_cmd("scancel", f"{explorer_id}_0").returncode == 0
    assert run_cmd("scancel", "--signal=USR2", f"{explorer_id}_1").returncode == 0
    wait_terminal(f"{explorer_id}_0", 120)
    wait_for(lambda: scontrol_field(f"{explorer_id}_1", "Restarts") == "1", 240, "the explorer's requeue",
             details=lambda: run_cmd("scontrol", "show", "job", f"{explorer_id}_1").stdout + log_tails(run))
    wait_step(run, 2, trainer_id)
    assert run_cmd("scancel", "--signal=USR2", trainer_id).returncode == 0
    wait_for(lambda: scontrol_field(trainer_id, "Restarts") == "1", 120, "the trainer's requeue after USR2")
    resumed = wait_for(lambda: resumed_steps(run, trainer_id)[1:], RUN_TIMEOUT_S, "the trainer to resume")[0]
    wait_step(run, resumed + 1, trainer_id)
    assert run_cmd("scontrol", "requeue", trainer_id).returncode == 0
    wait_for(lambda: scontrol_field(trainer_id, "Restarts") == "2", 120, "the external requeue")
    meta = wait_done(run, trainer_id)
    assert meta["step"] == total
    assert wait_terminal(trainer_id, 120) == {trainer_id: "COMPLETED"}, log_tails(run)
    assert wait_terminal(explorer_id, 120, n_rows=2) == {f"{explorer_id}_0": "CANCELLED",
                                                        f"{explorer_id}_1": "COMPLETED"}, log_tails(run)
    log = (run / "log" / f"{trainer_id}_0_log.out").read_text()
    assert "trainer 0 (restart 1, code" in log and "trainer 0 (restart 2, code" in log
    assert "got SIGUSR2" in log and "requeueing job" in log
    starts = resumed_steps(run, trainer_id)
    assert len(starts) == 3 and starts[0] == 0 and 0 < starts[1] <= starts[2], starts
    assert sorted(set(trainer_steps(run))) == list(range(1, total + 1))
    check_exactly_once(consumption(run), expected_consumed=4 * total)
    logs = {path.name: path.read_text(errors="replace") for path in (run / "log").glob("*.out")}
    assert not [name for name, text in logs.items() if "Traceback" in text], log_tails(run, 80)
    assert any((run / "monitor" / "wandb").rglob("run-*.wandb"))
    # The cancelled explorer stopped cleanly and recorded it (Slurm may still have killed the process
    # afterwards, in wandb's teardown, when the busy machine kept it past KillWait: 5 s on the local
    # cluster); or Slurm killed it before it could record its stop, and then status must not show
    # its last report as live. (Whether wandb's service died before the explorer finished its run
    # depends on who got the signal first: either way the stop is clean. tests/explorer_loop/
    # test_metrics.py kills it first.)
    cancelled = read_progress(run / "explorer_meta" / "explorer" / "0.json")
    first = logs[f"{explorer_id}_0_0_log.out"]
    status = rfthpc("status", str(run)).stdout
    if cancelled is not None and cancelled.state == "stopped":
        assert re.search(r"explorer\s+0\s+stopped\s", status), status
    else:
        assert "task 0: Killed" in first, first[-3000:]
        assert re.search(rf"explorer\s+0\s+gone: job {explorer_id}_0 CANCELLED", status), status


def test_time_limit_warning_requeues_the_trainer(slurm_cluster: None, demo_data: Path, runs: Path,
                                                 tmp_path: Path) -> None:
    """A trainer job still training at its time limit gets Slurm's own USR2 `signal_delay_s` before it,
    checkpoints, requeues and resumes.

    Its data cannot run out before the limit (many epochs, a step bound it cannot reach), so however
    fast the machine, the warning finds it training; every wait is derived from the limit.
    """
    limit_s, delay_s = 180, 60
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(
        demo_data, runs, "timelimit", buffer={"total_steps": 1_000_000, "total_epochs": 10_000},
        trainer={"save_interval": 0}, explorer={"rollout_model": {"engine_num": 1}},
        slurm={"signal_delay_s": delay_s, "trainer": {"time": f"00:{limit_s // 60:02d}:{limit_s % 60:02d}"}}))
    run = submit(cfg)
    trainer_id, _ = job_ids(run)
    # It may first queue behind jobs other tests left running; its time limit counts from its start.
    wait_for(lambda: scontrol_field(trainer_id, "JobState") == "RUNNING", RUN_TIMEOUT_S, "the trainer job to start",
             details=cluster_report)

    def requeued() -> bool:
        if scontrol_field(trainer_id, "Restarts") == "1":
            return True
        if _trainer_gone(trainer_id):
            pytest.fail(f"the trainer job ended instead of requeueing\n{log_tails(run)}")
        return False

    # Slurm sends the warning up to a minute off its time (its timers' resolution) and ends the job at
    # the limit (+ KillWait); by then the job has been requeued, or never will be.
    wait_for(requeued, limit_s + SLURM_TIMER_SLACK_S, "the requeue at the time limit",
             details=lambda: log_tails(run) + cluster_report())
    # The requeued attempt starts once the old one's credential expired, then resumes within its own limit.
    step = wait_for(lambda: resumed_steps(run, trainer_id)[1:], limit_s + RUN_TIMEOUT_S,
                    "the requeued trainer to resume", details=lambda: log_tails(run) + cluster_report())[0]
    text = (run / "log" / f"{trainer_id}_0_log.out").read_text()
    assert "got SIGUSR2" in text and "requeueing job" in text and "trainer 0 (restart 1, code" in text
    assert "stopped by a signal at step" in text
    # save_interval 0: the only checkpoint is the one written on the warning, and the trainer resumes there.
    assert step > 0 and (run / f"global_step_{step}").is_dir()
    assert (read_json(run / "experiences" / "_reader" / "checkpointed.json") or {})["counters"]["consumed"] >= 4 * step


def test_hetjob_layout_with_added_explorers(slurm_cluster: None, demo_data: Path, runs: Path,
                                            tmp_path: Path) -> None:
    """`slurm.layout: hetjob` runs trainer + explorer in one allocation; `add-explorers` joins mid-run."""
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(
        demo_data, runs, "hetjob", buffer={"total_steps": 12}, synchronizer=PACED,
        explorer={"rollout_model": {"engine_num": 1}}, slurm={"layout": "hetjob"}))
    run = submit(cfg)
    (het_id,) = job_ids(run)
    wait_running(het_id)
    added = rfthpc("add-explorers", "--run-dir", str(run), "--name", "explorer_new", "--array-size", "1")
    assert added.returncode == 0, added.stderr
    new_id = job_ids(run)[-1]
    meta = wait_done(run, het_id)
    assert wait_terminal(het_id, 120, n_rows=2) == {f"{het_id}+0": "COMPLETED", f"{het_id}+1": "COMPLETED"}, \
        log_tails(run)
    assert wait_terminal(new_id, 120) == {f"{new_id}_0": "COMPLETED"}, log_tails(run)
    taken = consumption(run)
    check_exactly_once(taken, expected_consumed=4 * meta["step"])
    assert {g.explorer for g in taken.covered} == {"explorer", "explorer_new"}
    text = rfthpc("status", str(run)).stdout
    assert f"{het_id}+0" in text and "trainer + explorer" in text and "explorer_new" in text
    assert (run / "explorers" / "explorer_new" / "config.yaml").is_file()


def test_colocated_layout_with_added_explorers(slurm_cluster: None, demo_data: Path, runs: Path,
                                               tmp_path: Path) -> None:
    """`slurm.layout: colocated` runs trainer + explorer as two tasks of one job on one node, sharing its (fake)
    GPU and taking turns on it (`enable_sleep_mode`); the run ends, every task trained once; `add-explorers` joins
    mid-run with a GPU of its own, taking no turns."""
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(
        demo_data, runs, "colocated", buffer={"total_steps": 12}, synchronizer=PACED,
        cluster={"node_num": 2, "gpu_per_node": 1},
        explorer={"rollout_model": {"engine_num": 1, "enable_sleep_mode": True}},
        slurm={"layout": "colocated", "trainer": {"time": "00:20:00", "cpus_per_task": 1, "mem": "5G"}}))
    run = submit(cfg)
    (job_id,) = job_ids(run)
    assert "#SBATCH --ntasks-per-node=2" in (run / "slurm" / "colocated.sbatch").read_text()
    wait_running(job_id)
    added = rfthpc("add-explorers", "--run-dir", str(run), "--name", "explorer_new", "--array-size", "1")
    assert added.returncode == 0, added.stderr
    new_id = job_ids(run)[-1]
    meta = wait_done(run, job_id)
    assert wait_terminal(job_id, 120) == {job_id: "COMPLETED"}, log_tails(run)
    assert wait_terminal(new_id, 120) == {f"{new_id}_0": "COMPLETED"}, log_tails(run)
    taken = consumption(run)
    check_exactly_once(taken, expected_consumed=4 * meta["step"])
    assert {g.explorer for g in taken.covered} == {"explorer", "explorer_new"}
    # Both tasks of the one job ran with the job's one GPU: the trainer's task 0, the explorer's task 1.
    logs = {p.name: p.read_text() for p in (run / "log").glob(f"{job_id}_*_log.out")}
    assert "trainer 0 (restart 0, code" in logs[f"{job_id}_0_log.out"] and ", GPUs 0)" in logs[f"{job_id}_0_log.out"]
    assert "explorer 0 (restart 0, code" in logs[f"{job_id}_1_log.out"] and ", GPUs 0)" in logs[f"{job_id}_1_log.out"]
    # The colocated explorer takes the trainer's versions from node-local memory.
    assert "--node-local-weights" in logs[f"{job_id}_0_log.out"]
    assert "the trainer's node-local copy" in logs[f"{job_id}_1_log.out"], logs[f"{job_id}_1_log.out"][-3000:]
    # The two take turns on the GPU they share; the added explorer has its own.
    assert "--time-share-gpus" in logs[f"{job_id}_0_log.out"]
    assert "time-sharing GPUs 0 with the trainer" in logs[f"{job_id}_1_log.out"]
    added_log = "".join(p.read_text() for p in (run / "log").glob(f"{new_id}_*_log.out"))
    assert "explorer 0 (restart 0, code" in added_log and "time-sharing" not in added_log
    text = rfthpc("status", str(run)).stdout
    assert "colocated" in text and "trainer + explorer" in text and "explorer_new" in text


def _sbatch(*args: str) -> str:
    out = run_cmd("sbatch", "--parsable", *args, env={"RFTHPC_PYTHON": PYTHON})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def test_trainer_and_explorer_templates(slurm_cluster: None, demo_data: Path, runs: Path, tmp_path: Path) -> None:
    """slurm/trainer.sbatch (2 nodes, torchrun) and slurm/explorer.sbatch, submitted by hand, run a tiny run."""
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, runs, "templates"))
    out = rfthpc("submit", "--config", str(cfg), "--dry-run")
    assert out.returncode == 0, out.stderr
    run = runs / "launch" / "templates"
    assert (run / "config.yaml").is_file() and not (run / "jobs.jsonl").exists()
    log = run / "log"
    trainer_id = _sbatch(f"--output={log}/%x-%j.out", str(REPO / "slurm" / "trainer.sbatch"), str(run))
    explorer_id = _sbatch("--array=0-1", f"--output={log}/%x-%A_%a.out", str(REPO / "slurm" / "explorer.sbatch"),
                          str(run))
    try:
        wait_done(run, trainer_id)
        assert wait_terminal(trainer_id, 120) == {trainer_id: "COMPLETED"}, log_tails(run)
        assert set(wait_terminal(explorer_id, 120, n_rows=2).values()) == {"COMPLETED"}, log_tails(run)
    finally:
        cancel(trainer_id, explorer_id)
    text = (log / f"rfthpc-trainer-{trainer_id}.out").read_text()
    assert "2 node(s) x 1 rank(s)" in text and "trainer.sbatch: done" in text
    check_exactly_once(consumption(run), expected_consumed=16)


def test_hetjob_and_add_explorers_templates(slurm_cluster: None, demo_data: Path, runs: Path,
                                            tmp_path: Path) -> None:
    """slurm/hetjob.sbatch runs the run in one allocation; slurm/add_explorers.sbatch adds an array to it."""
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, runs, "het-templates", buffer={"total_steps": 12},
                                                      synchronizer=PACED))
    assert rfthpc("submit", "--config", str(cfg), "--dry-run").returncode == 0
    run = runs / "launch" / "het-templates"
    log = run / "log"
    het_id = _sbatch(f"--output={log}/%x-%j.out", str(REPO / "slurm" / "hetjob.sbatch"), str(run))
    new_id = ""
    try:
        wait_running(het_id)
        out = rfthpc("add-explorers", "--run-dir", str(run), "--name", "explorer_new", "--dry-run")
        assert out.returncode == 0, out.stderr
        new_id = _sbatch("--array=0-0", f"--output={log}/%x-%A_%a.out",
                         str(REPO / "slurm" / "add_explorers.sbatch"), str(run), "explorer_new")
        meta = wait_done(run, het_id)
        assert wait_terminal(het_id, 120, n_rows=2) == {f"{het_id}+0": "COMPLETED", f"{het_id}+1": "COMPLETED"}, \
            log_tails(run)
        assert wait_terminal(new_id, 120) == {f"{new_id}_0": "COMPLETED"}, log_tails(run)
    finally:
        cancel(het_id, *([new_id] if new_id else []))
    taken = consumption(run)
    check_exactly_once(taken, expected_consumed=4 * meta["step"])
    assert {g.explorer for g in taken.covered} == {"explorer", "explorer_new"}
    assert os.stat(run).st_mode & 0o077 == 0
