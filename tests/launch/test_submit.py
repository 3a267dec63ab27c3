"""`rfthpc submit` and `add-explorers` against the local cluster: dry runs, permissions, credentials, bad input."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from rfthpc.rundir.jobs import read_jobs
from rfthpc.rundir.paths import RunDir
from tests.conftest import cancel
from tests.launch.conftest import (
    rfthpc,
    run_cmd,
    sacct_states,
    tiny_config,
    wait_for,
    wait_terminal,
    write_yaml,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

SECRETS = {"WANDB_API_KEY": "wandb-secret-7f3a9c", "HF_TOKEN": "hf_secret_b81d2e"}


def _modes(root: Path) -> list[tuple[str, int]]:
    # A process of a cancelled job may still be ending: a temporary file it renames can vanish
    # between listing and stat.
    modes = []
    for p in [root, *root.rglob("*")]:
        try:
            if not p.is_symlink():
                modes.append((str(p), stat.S_IMODE(p.stat().st_mode)))
        except FileNotFoundError:
            continue
    return modes


def _files_containing(root: Path, needles: list[str]) -> list[str]:
    found = []
    for p in root.rglob("*"):
        try:
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
        except FileNotFoundError:
            continue
        found += [f"{p}: {n}" for n in needles if n.encode() in data]
    return found


def _job_ids(run: Path) -> list[str]:
    return [r.job_id for r in read_jobs(RunDir(run))]


def test_dry_run_writes_scripts_and_config_without_slurm(demo_data: Path, tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "dry"))
    out = rfthpc("submit", "--config", str(cfg), "--dry-run", env={"PATH": str(tmp_path / "empty"), **SECRETS})
    assert out.returncode == 0, out.stderr
    run = tmp_path / "runs" / "launch" / "dry"
    scripts = run / "slurm" / "dry-run"
    assert sorted(p.name for p in scripts.iterdir()) == ["explorer-explorer.sbatch", "trainer.sbatch"]
    assert str(scripts / "trainer.sbatch") in out.stdout
    assert (run / "config.yaml").is_file() and not (run / "jobs.jsonl").exists()
    trainer = (scripts / "trainer.sbatch").read_text()
    assert "#SBATCH --signal=USR2@30" in trainer and "#SBATCH --requeue" in trainer and "umask 077" in trainer
    assert "--array=0-1%2" in (scripts / "explorer-explorer.sbatch").read_text()
    assert not _files_containing(run, list(SECRETS.values()))
    # Private to the user: no group or other bits anywhere.
    assert [(p, oct(m)) for p, m in _modes(run) if m & 0o077] == []


def test_share_group_makes_the_run_group_writable(demo_data: Path, tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "shared",
                                                      filesystem={"share_group": "root"}))
    out = rfthpc("submit", "--config", str(cfg), "--dry-run")
    assert out.returncode == 0, out.stderr
    run = tmp_path / "runs" / "launch" / "shared"
    modes = dict(_modes(run))
    assert modes[str(run)] == 0o2770
    assert modes[str(run / "config.yaml")] == 0o660
    assert modes[str(run / "slurm" / "dry-run" / "trainer.sbatch")] == 0o660
    assert "umask 007" in (run / "slurm" / "dry-run" / "trainer.sbatch").read_text()


def test_no_slurm_on_path_points_to_rfthpc_run(slurm_cluster: None, demo_data: Path, tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "nopath"))
    out = rfthpc("submit", "--config", str(cfg), env={"PATH": str(tmp_path / "empty")})
    assert out.returncode == 2
    assert "`sbatch` is not on PATH" in out.stderr and "rfthpc run --config" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs" / "launch" / "nopath" / "jobs.jsonl").exists()


def test_unreachable_controller_is_a_clear_error(slurm_cluster: None, demo_data: Path, tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    text = Path("/etc/slurm/slurm.conf").read_text()
    conf.write_text("\n".join("SlurmctldPort=6999" if ln.startswith("SlurmctldPort=") else ln
                              for ln in text.splitlines()) + "\n")
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "unreachable"))
    start = time.monotonic()
    out = rfthpc("submit", "--config", str(cfg), env={"SLURM_CONF": str(conf)}, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Slurm controller is unreachable" in out.stderr and "rfthpc run" in out.stderr
    assert time.monotonic() - start < 90


def test_rejected_partition_names_the_config_key(slurm_cluster: None, demo_data: Path, tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "badpart",
                                                      slurm={"trainer": {"partition": "nosuch"}}))
    out = rfthpc("submit", "--config", str(cfg))
    assert out.returncode == 2
    assert "Invalid partition name specified" in out.stderr
    assert "slurm.trainer.partition = nosuch" in out.stderr
    assert _job_ids(tmp_path / "runs" / "launch" / "badpart") == []


def test_rejected_account_cancels_the_jobs_queued_before(slurm_cluster: None, demo_data: Path,
                                                         tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "badacct",
                                                      slurm={"explorer": {"account": "nosuch"}}))
    out = rfthpc("submit", "--config", str(cfg))
    assert out.returncode == 2
    assert "Invalid account" in out.stderr and "slurm.explorer.account = nosuch" in out.stderr
    (trainer_id,) = _job_ids(tmp_path / "runs" / "launch" / "badacct")
    assert f"cancelled the jobs queued before it: {trainer_id}" in out.stderr
    assert wait_terminal(trainer_id, 60) == {trainer_id: "CANCELLED"}


def test_credentials_in_setup_lines_are_refused(demo_data: Path, tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "secret",
                                                      slurm={"setup": ["export WANDB_API_KEY=abc123"]}))
    out = rfthpc("submit", "--config", str(cfg), "--dry-run")
    assert out.returncode == 2 and "slurm.setup[0] sets a credential (WANDB_API_KEY)" in out.stderr
    assert not (tmp_path / "runs" / "launch" / "secret").exists()


@pytest.mark.slow
def test_explorer_array_lifecycle(slurm_cluster: None, demo_data: Path, tmp_path: Path) -> None:
    """An explorer-only run: no duplicate while it is queued; a warned task over `max_requeues` stops
    instead of requeueing; status and cancel; credentials stay out of the run directory; a changed
    config is refused, the same config resumes."""
    runs = tmp_path / "runs"
    # Enough tasks (the whole taskset) that explorer 1 is still running when it is cancelled, even on
    # a quiet machine.
    data = tiny_config(demo_data, runs, "lifecycle", mode="explore", buffer={"total_steps": 100},
                       slurm={"max_requeues": 0})
    cfg = write_yaml(tmp_path / "run.yaml", data)
    out = rfthpc("submit", "--config", str(cfg), env=SECRETS)
    assert out.returncode == 0, out.stderr
    run = runs / "launch" / "lifecycle"
    (job,) = _job_ids(run)
    try:
        assert "explorer array 'explorer', 2 tasks" in out.stdout and f"rfthpc cancel {run}" in out.stdout
        twice = rfthpc("submit", "--config", str(cfg))
        assert twice.returncode == 2 and f"still has queued or running jobs that this submission would " \
            f"duplicate: {job} (explorer explorer)" in twice.stderr

        log0 = run / "log" / f"{job}_0_0_log.out"
        wait_for(lambda: log0.exists() and "exploring stage" in log0.read_text(), 180, "explorer 0 to start")
        assert run_cmd("scancel", "--signal=USR2", f"{job}_0").returncode == 0
        wait_for(lambda: sacct_states(job).get(f"{job}_0") in {"FAILED", "COMPLETED"}, 120, "task 0 to stop")
        assert sacct_states(job)[f"{job}_0"] == "FAILED"
        assert "not requeued: the job already restarted 0 times (slurm.max_requeues = 0)" in log0.read_text()

        status = rfthpc("status", str(run))
        assert status.returncode == 0, status.stderr
        assert f"{job}_0" in status.stdout and "FAILED" in status.stdout and "explorer" in status.stdout

        cancelled = rfthpc("cancel", str(run), "--role", "explorer", "--name", "explorer")
        assert cancelled.returncode == 0 and f"cancelled job {job}" in cancelled.stdout
        assert wait_terminal(job, 60, n_rows=2)[f"{job}_1"] == "CANCELLED"
        assert rfthpc("cancel", str(run)).stdout.startswith("rfthpc cancel: no queued or running job")

        assert not _files_containing(run, list(SECRETS.values()))
        assert [(p, oct(m)) for p, m in _modes(run) if m & 0o077] == []

        changed = write_yaml(tmp_path / "changed.yaml", {**data, "buffer": {**data["buffer"], "batch_size": 8}})
        refused = rfthpc("submit", "--config", str(changed))
        assert refused.returncode == 2 and "already holds a different config" in refused.stderr
        assert "--resume" in refused.stderr
        again = rfthpc("submit", "--config", str(cfg))
        assert again.returncode == 0, again.stderr
        assert len(_job_ids(run)) == 2
    finally:
        cancel(*_job_ids(run))


def test_add_explorers_bad_input(demo_data: Path, tmp_path: Path) -> None:
    missing = rfthpc("add-explorers", "--run-dir", str(tmp_path / "nowhere"), "--name", "x")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "adds"))
    assert rfthpc("submit", "--config", str(cfg), "--dry-run").returncode == 0
    run = tmp_path / "runs" / "launch" / "adds"
    unnamed = rfthpc("add-explorers", "--run-dir", str(run))
    assert unnamed.returncode == 2 and "needs its own name" in unnamed.stderr
    same = rfthpc("add-explorers", "--run-dir", str(run), "--name", "explorer", "--dry-run")
    assert same.returncode == 2 and "is the run's own explorer array" in same.stderr
    tiny = rfthpc("add-explorers", "--run-dir", str(run), "--name", "more", "--array-size", "0", "--dry-run")
    assert tiny.returncode == 2 and "--array-size: 0 must be >= 1" in tiny.stderr
    new = write_yaml(tmp_path / "explorer_new.yaml", {
        "explorer": {"name": "explorer_new", "rollout_model": {"engine_num": 3}},
        "buffer": {"explorer_input": {"taskset": {"name": "other", "path": str(tmp_path / "no-such-data")}}},
    })
    bad_data = rfthpc("add-explorers", "--run-dir", str(run), "--config", str(new), "--dry-run")
    assert bad_data.returncode == 2 and "buffer.explorer_input.tasksets[0].path" in bad_data.stderr
    ok = write_yaml(tmp_path / "explorer_ok.yaml", {
        "explorer": {"name": "explorer_new", "rollout_model": {"engine_num": 3}},
        "slurm": {"explorer": {"partition": "other"}},
    })
    added = rfthpc("add-explorers", "--run-dir", str(run), "--config", str(ok), "--dry-run")
    assert added.returncode == 0, added.stderr
    script = (run / "slurm" / "dry-run" / "explorer-explorer_new.sbatch").read_text()
    assert "--array=0-2%3" in script and "--partition=other" in script and "--job-name=adds.explorer_new" in script
    merged = (run / "explorers" / "explorer_new" / "config.yaml").read_text()
    assert "mode: explore" in merged and "name: explorer_new" in merged
    assert os.stat(run / "explorers" / "explorer_new" / "config.yaml").st_mode & 0o077 == 0


def test_local_executor_runs_the_roles_here(demo_data: Path, tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(demo_data, tmp_path / "runs", "local"))
    out = rfthpc("submit", "--config", str(cfg), "--dry-run", "--slurm.executor", "local",
                 env={"PATH": str(tmp_path / "empty")})
    assert out.returncode == 0, out.stderr
    assert "slurm.executor is 'local': running trainer, explorer_0, explorer_1 here" in out.stdout
    assert "-m rfthpc explore --run-dir" in out.stdout and "--rank 1" in out.stdout
    assert not (tmp_path / "runs" / "launch" / "local" / "slurm").exists()


@pytest.mark.parametrize("command", ["submit", "run", "validate"])
def test_mistakes_the_roles_would_meet_after_the_queue_stop_every_command_first(
        command: str, demo_data: Path, tmp_path: Path) -> None:
    """A KL argument the trainer does not take and a prompt column the data lacks: exit 2 naming both
    keys, no run directory, nothing queued or started (`submit`, `run`, `config validate`)."""
    raw = tiny_config(demo_data, tmp_path / "runs", "mistakes",
                      algorithm={"kl_loss_fn": "k3", "kl_loss_fn_args": {"beta": 0.001}})
    raw["buffer"]["explorer_input"]["taskset"]["format"]["prompt_key"] = "problem"
    cfg = write_yaml(tmp_path / "run.yaml", raw)
    args = ["config", "validate", "--config", str(cfg)] if command == "validate" else [command, "--config", str(cfg)]
    out = rfthpc(*args, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "algorithm.kl_loss_fn_args: 'beta' not accepted; accepted: kl_coef" in out.stderr
    assert "format.prompt_key='problem' is not a column; the columns are: question, answer" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()


def test_a_shared_judge_gets_its_server_job_and_added_explorers_use_it(demo_data: Path, tmp_path: Path) -> None:
    judge = {"name": "judge", "model_path": str(demo_data / "model"), "engine_num": 2}
    cfg = write_yaml(tmp_path / "run.yaml", tiny_config(
        demo_data, tmp_path / "runs", "judged", explorer={"auxiliary_models": [judge]},
        slurm={"server": {"time": "00:30:00", "mem": "3G", "setup": ["export VLLM_CPU_KVCACHE_SPACE=1"]}}))
    out = rfthpc("submit", "--config", str(cfg), "--dry-run")
    assert out.returncode == 0, out.stderr
    run = tmp_path / "runs" / "launch" / "judged"
    scripts = run / "slurm" / "dry-run"
    assert sorted(p.name for p in scripts.iterdir()) == ["explorer-explorer.sbatch", "server-judge.sbatch",
                                                         "trainer.sbatch"]
    server = (scripts / "server-judge.sbatch").read_text()
    assert "--array=0-1%2" in server and "--job-name=judged.server-judge" in server and "--mem=3G" in server
    assert "export VLLM_CPU_KVCACHE_SPACE=1" in server
    other = write_yaml(tmp_path / "other_judge.yaml", {
        "explorer": {"name": "more", "auxiliary_models": [{**judge, "name": "critic"}]}})
    refused = rfthpc("add-explorers", "--run-dir", str(run), "--config", str(other), "--dry-run")
    assert refused.returncode == 2
    assert ("explorer.auxiliary_models[0] ('critic') has placement shared, but the run serves no shared auxiliary "
            "model of that name (it serves: judge)") in refused.stderr
    added = rfthpc("add-explorers", "--run-dir", str(run), "--name", "more", "--dry-run")
    assert added.returncode == 0, added.stderr
    assert not (scripts / "server-judge-more.sbatch").exists()
