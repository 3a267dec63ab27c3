"""A ROLL or veRL config given to `rfthpc config validate|show`, `run` or `submit` is recognised by its
top-level keys, says so first, and is read through its importer (`rfthpc.dialects.detect`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.cli import main
from rfthpc.config import load_config
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)

EXAMPLES = Path(__file__).parent / "roll_examples"
AGENTIC = EXAMPLES / "qwen2.5-0.5B-agentic" / "agent_val_frozen_lake_async.yaml"
MULTIMODAL = EXAMPLES / "qwen2.5-vl-7B-rlvr" / "rlvr_async.yaml"
VERL = Path(__file__).parent / "verl_examples" / "config" / "ppo_trainer.yaml"


def _copy(tmp_path: Path, example: Path) -> Path:
    """The example with the environments file it includes, in ROLL's layout under tmp_path."""
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "traj_envs.yaml").write_text((EXAMPLES / "config" / "traj_envs.yaml").read_text())
    (tmp_path / "exp").mkdir(exist_ok=True)
    path = tmp_path / "exp" / example.name
    path.write_text(example.read_text())
    return path


@pytest.mark.parametrize("action", ["validate", "show"])
def test_config_commands_read_a_roll_config_through_the_importer(
        tmp_path: Path, action: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(tmp_path, AGENTIC)
    assert main(["config", action, "--no-path-checks", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    first = err.splitlines()[0]
    assert first.startswith(f"rfthpc: note: {path}: a ROLL config (actor_train, actor_infer, rollout_batch_size)")
    assert "rfthpc config import --from roll" in first
    assert "ROLL's named chat template" in err  # the importer's notes follow
    if action == "validate":
        assert out.strip() == f"{path}: valid (1 stage: rft)"
    else:
        assert "env_workflow" in out and "algorithm.policy_loss_fn" not in out  # the translated config, as YAML
    assert (tmp_path / "exp" / f"{path.stem}.tasks" / "train.jsonl").is_file()  # the seeds, beside the config


def test_run_and_submit_load_a_roll_config_as_its_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` and `submit` load through load_config, as validate does: the same translated config, whose
    tasksets the run's jobs find from any directory."""
    monkeypatch.chdir(tmp_path)
    loaded = load_config(_copy(tmp_path, AGENTIC).relative_to(tmp_path), check_paths=False)
    assert loaded.notes[0].endswith("(that writes the rfthpc config it becomes, to edit)")
    cfg = loaded.config
    assert cfg.algorithm.advantage_fn == "lite_ppo" and cfg.synchronizer.sync_offset == 1
    assert cfg.buffer.explorer_input.tasksets[0].workflow_args["env"] == "frozen_lake"
    assert cfg.buffer.explorer_input.tasksets[0].path == str(tmp_path / "exp" / f"{AGENTIC.stem}.tasks" / "train.jsonl")


def test_overrides_apply_to_the_imported_config(tmp_path: Path) -> None:
    loaded = load_config(_copy(tmp_path, AGENTIC), ["--buffer.total_steps", "3"], check_paths=False)
    assert loaded.config.buffer.total_steps == 3


def test_a_refused_roll_config_says_what_it_is_first(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(MULTIMODAL, check_paths=False)
    first, second, *rest = str(e.value).splitlines()
    assert "a ROLL config" in first and "rfthpc config import --from roll" in first
    assert "ROLL setting(s) cannot be imported" in second
    assert [line.split(":")[0] for line in rest if line.startswith("  - ")] == [
        "  - actor_train.data_args.image_max_pixels"]


def test_a_verl_config_is_read_through_its_importer(capsys: pytest.CaptureFixture[str]) -> None:
    main(["config", "validate", "--no-path-checks", "--config", str(VERL)])
    first = capsys.readouterr().err.splitlines()[0]
    assert f"{VERL}: a veRL config (actor_rollout_ref)" in first and "config import --from verl" in first


def test_an_rfthpc_config_with_roll_keys_stays_rfthpc_s(tmp_path: Path, base: str) -> None:  # noqa: F811
    """ROLL keys mixed into an rfthpc config are that config's keys, not a ROLL config."""
    loaded = load_config(write(tmp_path, base + "async_generation_ratio: 2\n"))
    assert loaded.config.synchronizer.sync_offset == 2
    assert not any("a ROLL config" in note for note in loaded.notes)
