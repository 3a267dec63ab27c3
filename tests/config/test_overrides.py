"""Precedence defaults < YAML < command line, and the slurm section's derived values."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import dump_yaml, load_config, read_yaml
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)


def test_cli_overrides_yaml_which_overrides_defaults(tmp_path: Path, base: str) -> None:  # noqa: F811
    path = write(tmp_path, base)
    cfg = load_config(path).config
    assert cfg.algorithm.optimizer.lr == pytest.approx(1e-6)  # default
    assert cfg.algorithm.repeat_times == 4  # YAML
    cfg = load_config(path, ["--algorithm.optimizer.lr", "3e-5", "--algorithm.repeat_times", "2"]).config
    assert cfg.algorithm.optimizer.lr == pytest.approx(3e-5)
    assert cfg.algorithm.repeat_times == 2
    assert cfg.buffer.train_batch_size == 8  # derived from the overridden value


def test_override_of_a_list_element_and_a_literal(tmp_path: Path, base: str) -> None:  # noqa: F811
    path = write(tmp_path, base)
    cfg = load_config(path, ["--buffer.explorer_input.tasksets.0.rollout_args.temperature", "0.5",
                             "--synchronizer.sync_offset", "2", "--mode", "explore"]).config
    assert cfg.buffer.explorer_input.tasksets[0].rollout_args.temperature == pytest.approx(0.5)
    assert cfg.synchronizer.max_staleness == 2
    assert cfg.mode == "explore"


def test_unknown_override_flag_exits_2(tmp_path: Path, base: str) -> None:  # noqa: F811
    with pytest.raises(SystemExit) as e:
        load_config(write(tmp_path, base), ["--algorithm.optimiser.lr", "1"])
    assert e.value.code == 2


def test_dumped_config_round_trips(tmp_path: Path, base: str) -> None:  # noqa: F811
    loaded = load_config(write(tmp_path, base), ["--buffer.batch_size", "2"])
    again = write(tmp_path, dump_yaml(loaded.base), "again.yaml")
    assert load_config(again).config == loaded.config
    assert read_yaml(again)["buffer"]["batch_size"] == 2


def test_slurm_defaults_follow_the_cluster(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base.replace("gpu_per_node: 2", "gpu_per_node: 8") + (
        "explorer:\n  rollout_model:\n    engine_num: 2\n    tensor_parallel_size: 2\n"
        "slurm:\n  trainer:\n    time: 12:00:00\n"
    )
    cfg = load_config(write(tmp_path, text)).config
    assert cfg.slurm.explorer.array_size == 2
    assert cfg.slurm.explorer.gpus_per_node == 2
    assert cfg.slurm.trainer.gpus_per_node == 4
    assert cfg.slurm.trainer.time == "12:00:00"  # not YAML 1.1's base-60 integer
    # A shared auxiliary model (a judge; the default placement) runs in a server job: its GPUs count once.
    model = base.split("model_path: ", 1)[1].split("\n", 1)[0]
    judge = f"  auxiliary_models:\n    - name: judge\n      model_path: {model}\n      tensor_parallel_size: 1\n"
    cfg = load_config(write(tmp_path, text.replace("slurm:\n", judge + "slurm:\n"))).config
    assert (cfg.slurm.explorer.array_size, cfg.slurm.explorer.gpus_per_node) == (2, 2)
    assert cfg.slurm.trainer.gpus_per_node == 3
    # Placed per explorer, it runs next to every rollout engine: its GPUs count per explorer.
    judge += "      placement: per_explorer\n"
    cfg = load_config(write(tmp_path, text.replace("slurm:\n", judge + "slurm:\n"))).config
    assert (cfg.slurm.explorer.array_size, cfg.slurm.explorer.gpus_per_node) == (2, 3)
    assert cfg.slurm.trainer.gpus_per_node == 2
