"""`slurm.layout: colocated`: the trainer and the explorers in one job on one node, sharing its GPUs. The job
and its tasks' roles and GPUs as submitted (no cluster needed here; tests/launch/test_e2e.py runs one), and
what validation refuses: a shape that does not fit on one node, and a trainer and an engine that do not fit
in a GPU's memory together (`cluster.gpu_memory_gb`, the figures named)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rfthpc.config import load_config
from rfthpc.config.colocation import colocation_estimate, parameter_count
from rfthpc.errors import ConfigError
from rfthpc.launch.submission import plan_jobs
from rfthpc.rundir.paths import RunDir
from tests.launch.test_golden import BASE

RUN = RunDir("/srv/runs/demo/tiny")

COLOCATED: dict[str, Any] = {
    **BASE,
    "cluster": {"node_num": 1, "gpu_per_node": 4},
    "explorer": {"rollout_model": {"engine_num": 2, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.4}},
    "slurm": {**BASE["slurm"], "layout": "colocated",
              "trainer": {**BASE["slurm"]["trainer"], "nodes": 1}},
}


def _load(tmp_path: Path, data: dict[str, Any], check_paths: bool = False):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path, check_paths=check_paths)


def test_one_job_holds_the_trainer_and_the_explorers_on_one_nodes_gpus(tmp_path: Path) -> None:
    loaded = _load(tmp_path, COLOCATED)
    cfg = loaded.config
    assert any("set cluster.gpu_memory_gb (the memory of one GPU) to have validation check" in n for n in loaded.notes)
    [plan] = plan_jobs(cfg, ["both"], RUN, None)
    assert (plan.kind, plan.array_size, plan.trainer_nodes, plan.explorer) == ("colocated", 2, 1, "explorer")
    script = plan.render()
    for line in ("#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=3", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --job-name=tiny.colocated"):
        assert line in script, script
    [job] = plan.callables
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "3", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "1"}
    assert job.task_role(env) == ("trainer", 0)
    trainer_env = job.child_env(env)
    assert (trainer_env["SLURM_NTASKS"], trainer_env["CUDA_VISIBLE_DEVICES"]) == ("1", "0,1,2,3")
    assert "torch.distributed.run" in job.command(env)  # the trainer on all four GPUs
    second = {**env, "SLURM_PROCID": "2"}
    assert job.task_role(second) == ("explorer", 1)
    assert job.child_env(second)["CUDA_VISIBLE_DEVICES"] == "2,3"  # its own group of the shared GPUs
    assert job.command(second)[-4:] == ["--name", "explorer", "--rank", "1"]


@pytest.mark.parametrize(("change", "message"), [
    ({"explorer": {"rollout_model": {"engine_num": 3, "tensor_parallel_size": 2}}},
     "3 engines x 2 GPUs do not fit on the colocated node's 4 GPUs"),
    ({"slurm": {**COLOCATED["slurm"], "trainer": {**COLOCATED["slurm"]["trainer"], "nodes": 2}}},
     "slurm.trainer.nodes: 2; slurm.layout colocated runs the trainer and the explorers in one job on one node"),
])
def test_a_shape_that_does_not_fit_one_node_is_refused(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, {**COLOCATED, **change})


def test_the_memory_estimate_names_its_figures(tmp_path: Path, demo_data: Path) -> None:
    """With the GPUs' memory given, the trainer's share (P (2b + 8) / G + workspace) and the engine's claim
    must fit together; the estimate is in `config show`'s notes, and a run that does not fit is refused with
    the figures and the utilization that would fit."""
    tiny_model = demo_data / "model"
    count = parameter_count(tiny_model)
    assert count is not None and count > 1000
    tiny = {**COLOCATED, "model": {**COLOCATED["model"], "model_path": str(tiny_model), "dtype": "bfloat16"},
            "algorithm": {**COLOCATED["algorithm"], "kl_loss_fn": "none"}}
    fits = {**tiny, "cluster": {**tiny["cluster"], "gpu_memory_gb": 80}}
    loaded = _load(tmp_path, fits)
    estimate = colocation_estimate(loaded.config)
    assert estimate is not None and estimate.fits
    assert estimate.trainer_gib == pytest.approx(count * 12 / 4 / 1024 ** 3 + 3.0)
    assert estimate.engine_gib == pytest.approx(32.0)
    assert any(note.startswith("colocated on GPUs of 80 GiB: trainer ~3.0 GiB per GPU") for note in loaded.notes)
    small = {**tiny, "cluster": {**tiny["cluster"], "gpu_memory_gb": 4}}
    with pytest.raises(ConfigError, match=r"cluster.gpu_memory_gb: colocated on GPUs of 4 GiB: trainer ~3.0 GiB per "
                                          r"GPU .* rollout engine 1.6 GiB .* 4.6 GiB do not fit in 4 GiB; lower "
                                          r"explorer.rollout_model.gpu_memory_utilization to at most 0.24"):
        _load(tmp_path, small)


def _tiny(demo_data: Path, gpu_gib: float, utilization: float, **rollout: Any) -> dict[str, Any]:
    return {**COLOCATED, "model": {**COLOCATED["model"], "model_path": str(demo_data / "model"), "dtype": "bfloat16"},
            "algorithm": {**COLOCATED["algorithm"], "kl_loss_fn": "none"},
            "cluster": {**COLOCATED["cluster"], "gpu_memory_gb": gpu_gib},
            "explorer": {"rollout_model": {**COLOCATED["explorer"]["rollout_model"],
                                           "gpu_memory_utilization": utilization, **rollout}}}


def test_gpus_are_time_shared_where_the_two_fit_only_one_at_a_time(tmp_path: Path, demo_data: Path) -> None:
    """Trainer ~3.0 GiB and engine 3.6 GiB of a 6 GiB GPU: not together, each beside the 2 GiB the sleeping
    other keeps. Left unset, sleep mode is chosen, `config show` says so, and the colocated job's trainer and
    explorers are started taking turns on the GPUs; set false, the run is refused saying it would fit so."""
    loaded = _load(tmp_path, _tiny(demo_data, 6, 0.6))
    assert loaded.config.explorer.rollout_model.enable_sleep_mode is True
    assert any(note.endswith("time-sharing the GPUs (enable_sleep_mode)") for note in loaded.notes), loaded.notes
    [plan] = plan_jobs(loaded.config, ["both"], RUN, None)
    [job] = plan.callables
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "3", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "1"}
    assert "--time-share-gpus" in job.command(env)
    assert job.command({**env, "SLURM_PROCID": "1"})[-1] == "--time-share-gpus"
    with pytest.raises(ConfigError, match=r"6.6 GiB do not fit in 6 GiB \(they would fit one at a time: leave "
                                          r"explorer.rollout_model.enable_sleep_mode unset or set it true"):
        _load(tmp_path, _tiny(demo_data, 6, 0.6, enable_sleep_mode=False))
    fits = _load(tmp_path, _tiny(demo_data, 80, 0.4)).config
    assert fits.explorer.rollout_model.enable_sleep_mode is False  # both fit at once: no turns to take
    [plan] = plan_jobs(fits, ["both"], RUN, None)
    assert "--time-share-gpus" not in plan.callables[0].command(env)


def test_a_run_that_fits_neither_way_or_sleeps_without_a_colocated_trainer_is_refused(tmp_path: Path,
                                                                                      demo_data: Path) -> None:
    with pytest.raises(ConfigError, match=r"cluster.gpu_memory_gb: colocated on GPUs of 4.5 GiB: .* time-sharing the "
                                          r"GPUs, each part needs its share beside the 2 GiB the other keeps while it "
                                          r"sleeps, and 5.0 GiB do not fit in 4.5 GiB"):
        _load(tmp_path, _tiny(demo_data, 4.5, 0.4, enable_sleep_mode=True))
    separate = {**COLOCATED, "slurm": {**COLOCATED["slurm"], "layout": "separate"},
                "cluster": {"node_num": 2, "gpu_per_node": 4},
                "explorer": {"rollout_model": {"engine_num": 2, "enable_sleep_mode": True}}}
    with pytest.raises(ConfigError, match="enable_sleep_mode: true time-shares GPUs with a trainer on the same ones; "
                                          "set slurm.layout: colocated"):
        _load(tmp_path, separate)
