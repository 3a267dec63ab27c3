"""veRL settings reach rfthpc's fields from every place a user can give them (YAML, a veRL file,
the command line, a stage), and a stage's single taskset overrides the run's."""

from __future__ import annotations

import shutil
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
import yaml

from rfthpc.config import dump_yaml, load_config
from rfthpc.config.load import load_resolved
from rfthpc.config.settings import trainer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)

VERL = """
trainer:
  trainer_config:
    actor_rollout_ref:
      actor:
        optim:
          lr: 5.0e-6
        ppo_epochs: 1
"""


def test_verl_values_given_on_the_command_line_reach_their_fields(tmp_path: Path, base: str) -> None:  # noqa: F811
    path = write(tmp_path, base + VERL)
    assert load_config(path).config.algorithm.optimizer.lr == pytest.approx(5e-6)
    cfg = load_config(path, ["--trainer.trainer_config.actor_rollout_ref.actor.optim.lr", "1e-3",
                             "--trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs", "4"]).config
    assert cfg.algorithm.optimizer.lr == pytest.approx(1e-3) and cfg.trainer.ppo_epochs == 4
    # The rfthpc key given on the same command line wins over its veRL spelling.
    cfg = load_config(path, ["--trainer.trainer_config.actor_rollout_ref.actor.optim.lr", "1e-3",
                             "--algorithm.optimizer.lr", "2e-4"]).config
    assert cfg.algorithm.optimizer.lr == pytest.approx(2e-4)


def test_a_verl_file_is_merged_deeply_with_inline_settings_and_copied_into_the_run(
    tmp_path: Path, base: str  # noqa: F811
) -> None:
    verl_file = tmp_path / "verl.yaml"
    verl_file.write_text(yaml.safe_dump({"actor_rollout_ref": {"actor": {
        "optim": {"lr": 5e-6}, "ppo_micro_batch_size_per_gpu": 2}}}))
    inline = ("trainer:\n  trainer_config_path: " + str(verl_file) + "\n  trainer_config:\n"
              "    actor_rollout_ref:\n      actor:\n        ppo_epochs: 2\n")
    loaded = load_config(write(tmp_path, base + inline))
    cfg = loaded.config
    assert cfg.algorithm.optimizer.lr == pytest.approx(5e-6)  # from the file, not lost to the inline block
    assert cfg.trainer.ppo_micro_batch_size_per_gpu == 2 and cfg.trainer.ppo_epochs == 2
    # The run's stored config holds the settings; the jobs never read the file again.
    stored = write(tmp_path, dump_yaml(loaded.base), "run-config.yaml")
    verl_file.unlink()
    again = load_resolved(stored).config
    assert again.algorithm.optimizer.lr == pytest.approx(5e-6) and again.trainer.ppo_epochs == 2
    with pytest.raises(ConfigError, match=r"trainer.trainer_config_path: config file .*verl.yaml does not exist"):
        load_config(write(tmp_path, base + inline))


def test_a_stages_verl_settings_reach_that_stage_and_unknown_ones_are_refused(
    tmp_path: Path, base: str  # noqa: F811
) -> None:
    stages = """
stages:
  - stage_name: first
  - stage_name: second
    trainer:
      trainer_config:
        actor_rollout_ref:
          actor:
            optim:
              lr: 5.0e-5
"""
    first, second = load_config(write(tmp_path, base + VERL + stages)).stages
    assert first.config.algorithm.optimizer.lr == pytest.approx(5e-6)
    assert second.config.algorithm.optimizer.lr == pytest.approx(5e-5)
    bad = stages + "            bogus_key: 3\n"
    with pytest.raises(ConfigError, match=r"stage 'second'.*trainer.trainer_config.actor_rollout_ref.actor.bogus_key"):
        load_config(write(tmp_path, base + bad))


def test_the_trainer_reads_each_stages_own_values_and_one_policy_through_the_stages(
    tmp_path: Path, base: str  # noqa: F811
) -> None:
    stages = """
stages:
  - stage_name: warmup
    algorithm:
      optimizer:
        lr: 2.0e-5
  - stage_name: rl
    synchronizer:
      sync_interval: 2
"""
    loaded = load_config(write(tmp_path, base + stages))
    warmup, rl = trainer_settings(loaded.stages).stages
    assert (warmup.name, rl.name) == ("warmup", "rl")
    assert warmup.algorithm.optimizer.lr == pytest.approx(2e-5)
    assert rl.algorithm.optimizer.lr != warmup.algorithm.optimizer.lr
    assert (warmup.sync_interval, rl.sync_interval) == (1, 2) and rl.max_staleness == 1
    assert warmup.claim_sets == ("warmup.t",) and rl.claim_sets == ("rl.t",)  # both explore: a claim set each
    with pytest.raises(FrozenInstanceError):
        rl.sync_interval = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        rl.algorithm.kl_loss_fn_args["kl_coef"] = 1.0  # type: ignore[index]
    changed = stages + "    model:\n      dtype: float16\n"
    with pytest.raises(ConfigError, match=r"stage 'rl': model.dtype 'float16' differs from stage 'warmup'.*one policy"):
        load_config(write(tmp_path, base + changed))


def test_a_stages_single_taskset_overrides_the_runs(tmp_path: Path, base: str) -> None:  # noqa: F811
    other = tmp_path / "other.jsonl"
    shutil.copy(tmp_path / "data.jsonl", other)
    stages = f"""
stages:
  - stage_name: first
  - stage_name: second
    buffer:
      explorer_input:
        taskset:
          path: {other}
          split: test
"""
    first, second = load_config(write(tmp_path, base + stages)).stages
    assert first.config.buffer.explorer_input.tasksets[0].path == str(tmp_path / "data.jsonl")
    (ts,) = second.config.buffer.explorer_input.tasksets
    assert (ts.path, ts.split, ts.name, ts.format.prompt_key) == (str(other), "test", "t", "question")


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--slurm.explorer.array_size", "-1", "slurm.explorer.array_size: -1 must be >= 1"),
        ("--slurm.explorer.array_size", "0", "slurm.explorer.array_size: 0 must be >= 1"),
        ("--slurm.explorer.array_parallelism", "0", "slurm.explorer.array_parallelism: 0 must be >= 1"),
        ("--slurm.trainer.nodes", "0", "slurm.trainer.nodes: 0 must be >= 1"),
        ("--explorer.rollout_model.tensor_parallel_size", "2",
         "slurm.explorer.gpus_per_node: 1, but an explorer runs its rollout engine (tensor_parallel_size 2)"),
    ],
)
def test_impossible_slurm_sizes_are_refused(tmp_path: Path, base: str, flag: str, value: str,  # noqa: F811
                                            message: str) -> None:
    path = write(tmp_path, base.replace("  gpu_per_node: 2\n", "  gpu_per_node: 4\n")
                 + "slurm:\n  explorer:\n    gpus_per_node: 1\n")
    load_config(path)
    with pytest.raises(ConfigError) as e:
        load_config(path, [flag, value])
    assert message in str(e.value)


def test_gpus_the_derived_layout_leaves_idle_are_noted(tmp_path: Path, base: str) -> None:  # noqa: F811
    """Trinity-RFT would give the trainer every GPU the explorers leave; here the trainer has
    slurm.trainer.nodes nodes, so a bigger cluster.node_num gets a note saying how to use the rest."""
    two_nodes = base.replace("  node_num: 1\n  gpu_per_node: 2\n", "  node_num: 2\n  gpu_per_node: 8\n")
    path = write(tmp_path, two_nodes + "explorer:\n  rollout_model:\n    engine_num: 4\n")
    (note,) = load_config(path).notes
    assert "16 GPUs; the explorers use 4 and the trainer 1 node(s) x 8, so 4 stay idle" in note
    assert "slurm.trainer.nodes: 2" in note
    cfg = load_config(path, ["--slurm.trainer.nodes", "2"])
    assert cfg.notes == [] and cfg.config.slurm.trainer.gpus_per_node == 6
    assert load_config(write(tmp_path, base)).notes == []
