"""Bad checkpoints give a clear error naming the file, and nothing is written for that step."""

from __future__ import annotations

import json
import os
import shutil
import socket
import warnings
from pathlib import Path

import pytest
import torch

from rfthpc.cli import main as rfthpc_main
from rfthpc.convert.merge import ConvertOptions, convert_checkpoints
from rfthpc.errors import UserError
from tests.convert.conftest import reference


def _convert_fails(run: Path, match: str, **options) -> None:
    """Converting `run` fails with a message matching `match`, leaving no output behind."""
    with pytest.raises(UserError, match=match):
        outcomes = convert_checkpoints(run, ConvertOptions(progress=False, **options))
        raise UserError(" | ".join(o.detail for o in outcomes if o.status == "failed"))
    actor = run / "global_step_1" / "actor"
    assert not (actor / "huggingface" / "model.safetensors").exists()
    assert [p.name for p in actor.iterdir() if p.name.startswith(".tmp-")] == []


def test_a_directory_without_checkpoints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "experiences").mkdir()
    assert rfthpc_main(["convert", "--checkpoint-dir", str(tmp_path)]) == 2
    assert f"no checkpoint found in {tmp_path}" in capsys.readouterr().err
    assert rfthpc_main(["convert", "--checkpoint-dir", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_step_without_model_shards(tmp_path: Path) -> None:
    (tmp_path / "global_step_3" / "actor").mkdir(parents=True)
    with pytest.raises(UserError, match=r"global_step_3/actor: no model shards found"):
        outcomes = convert_checkpoints(tmp_path, ConvertOptions(progress=False, base_model_dir=None))
        raise UserError(outcomes[0].detail)


def test_missing_dcp_shard(copy_run) -> None:
    run = copy_run("rfthpc")
    (run / "global_step_1" / "actor" / "model" / "__1_0.distcp").unlink()
    _convert_fails(run, r"missing shard .*global_step_1/actor/model/__1_0\.distcp")


def test_truncated_dcp_shard(copy_run) -> None:
    run = copy_run("rfthpc")
    shard = run / "global_step_1" / "actor" / "model" / "__0_0.distcp"
    os.truncate(shard, shard.stat().st_size // 2)
    _convert_fails(run, r"__0_0\.distcp is truncated")


def test_truncated_dcp_metadata(copy_run) -> None:
    run = copy_run("rfthpc")
    md = run / "global_step_1" / "actor" / "model" / ".metadata"
    os.truncate(md, md.stat().st_size - 100)
    _convert_fails(run, r"model/\.metadata cannot be read .*truncated or corrupt")


def test_dcp_shard_of_a_save_with_another_world_size(copy_run, made: Path, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    single = tmp_path / "world_size_1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # saving without a process group is the point
        dcp.save(reference(made), checkpoint_id=single, no_dist=True)
    run = copy_run("rfthpc")
    shutil.copyfile(single / "__0_0.distcp", run / "global_step_1" / "actor" / "model" / "__0_0.distcp")
    _convert_fails(run, r"__0_0\.distcp does not belong to this checkpoint")


def test_unfinished_rfthpc_checkpoint(copy_run) -> None:
    run = copy_run("rfthpc")
    (run / "global_step_1" / "actor" / "rfthpc_checkpoint.json").unlink()
    _convert_fails(run, r"rfthpc_checkpoint\.json is missing")


def test_missing_verl_shard(copy_run) -> None:
    run = copy_run("verl")
    (run / "global_step_1" / "actor" / "model_world_size_2_rank_1.pt").unlink()
    _convert_fails(run, r"missing shard .*model_world_size_2_rank_1\.pt")


def test_truncated_verl_shard(copy_run) -> None:
    run = copy_run("verl")
    shard = run / "global_step_1" / "actor" / "model_world_size_2_rank_1.pt"
    os.truncate(shard, shard.stat().st_size - 1000)
    _convert_fails(run, r"model_world_size_2_rank_1\.pt cannot be read .*truncated or corrupt")


def test_verl_shard_of_a_save_with_another_world_size(copy_run) -> None:
    run = copy_run("verl")
    actor = run / "global_step_1" / "actor"
    # A world-size-2 shard, named as the only shard of a world-size-1 save.
    os.rename(actor / "model_world_size_2_rank_0.pt", actor / "model_world_size_1_rank_0.pt")
    (actor / "model_world_size_2_rank_1.pt").unlink()
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    _convert_fails(run, r"model_world_size_1_rank_0\.pt was saved by a run of world size 2, not 1")


def test_verl_shards_of_mixed_world_sizes(copy_run) -> None:
    run = copy_run("verl")
    actor = run / "global_step_1" / "actor"
    shutil.copyfile(actor / "model_world_size_2_rank_0.pt", actor / "model_world_size_4_rank_0.pt")
    _convert_fails(run, r"mixes shards of different world sizes")


def test_verl_fsdp_config_of_another_world_size(copy_run) -> None:
    run = copy_run("verl")
    (run / "global_step_1" / "actor" / "fsdp_config.json").write_text(json.dumps({"world_size": 4}))
    _convert_fails(run, r"fsdp_config\.json says world_size 4")


def test_verl_shard_of_another_rank(copy_run) -> None:
    run = copy_run("verl")
    actor = run / "global_step_1" / "actor"
    shutil.copyfile(actor / "model_world_size_2_rank_0.pt", actor / "model_world_size_2_rank_1.pt")
    _convert_fails(run, r"model_world_size_2_rank_1\.pt holds the shard of rank 0, not rank 1")


def test_config_of_another_model(copy_run) -> None:
    run = copy_run("verl")
    config_path = run / "global_step_1" / "actor" / "huggingface" / "config.json"
    config = json.loads(config_path.read_text())
    config["num_hidden_layers"] = 3
    config["layer_types"] = ["full_attention"] * 3
    config_path.write_text(json.dumps(config))
    _convert_fails(run, r"do not fit the Qwen2ForCausalLM .*12 missing \(e\.g\. model\.layers\.2\.")


def test_bad_base_model_dir(copy_run, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"--base-model-dir .* has no config\.json"):
        convert_checkpoints(copy_run("rfthpc"), ConvertOptions(base_model_dir=tmp_path, progress=False))


def test_one_bad_step_does_not_stop_the_others(copy_run, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run("rfthpc")
    shutil.copytree(run / "global_step_1", run / "global_step_2")
    (run / "global_step_2" / "actor" / "model" / "__1_0.distcp").unlink()
    assert rfthpc_main(["convert", "--checkpoint-dir", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "1 of 2 checkpoint(s) not converted" in err and "global_step_2/actor/model/__1_0.distcp" in err
    assert (run / "global_step_1" / "actor" / "huggingface" / "model.safetensors").is_file()
    assert not (run / "global_step_2" / "actor" / "huggingface").exists()


def test_leftovers_of_a_killed_conversion_are_cleaned_or_restored(copy_run, made: Path) -> None:
    run = copy_run("verl")
    actor = run / "global_step_1" / "actor"
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    host = socket.gethostname()
    # Killed between its two renames: the previous huggingface/ sits aside, none in place.
    os.rename(actor / "huggingface", actor / f".tmp-huggingface-replaced.{host}-{dead_pid}-0badf00d")
    # Killed while writing: a half-written staging directory.
    staging = actor / f".tmp-huggingface.{host}-{dead_pid}-deadbeef"
    staging.mkdir()
    (staging / "model.safetensors").write_bytes(b"half")
    convert_checkpoints(run, ConvertOptions(progress=False))
    assert sorted(p.name for p in actor.iterdir() if p.name.startswith(".")) == []
    from transformers import AutoModelForCausalLM

    state = AutoModelForCausalLM.from_pretrained(actor / "huggingface").state_dict()
    assert all(torch.equal(state[k], v) for k, v in reference(made).items())


def test_a_config_that_is_not_json_is_named(copy_run) -> None:
    run = copy_run("verl")
    config_path = run / "global_step_1" / "actor" / "huggingface" / "config.json"
    config_path.write_text(config_path.read_text()[:200])
    _convert_fails(run, r"huggingface/config\.json is not valid JSON")


def test_a_model_type_transformers_does_not_know_still_converts(copy_run) -> None:
    """Custom model code (an unknown model_type) and no generation config to copy: the model is written
    without a derived generation config instead of the conversion stopping on transformers' error."""
    run = copy_run("rfthpc")
    hf_config = run / "global_step_1" / "actor" / "hf_config"
    config = json.loads((hf_config / "config.json").read_text())
    (hf_config / "config.json").write_text(json.dumps({**config, "model_type": "mymodel"}))
    (hf_config / "generation_config.json").unlink(missing_ok=True)
    outcomes = convert_checkpoints(run, ConvertOptions(progress=False))
    assert {o.status for o in outcomes} == {"converted"}, [o.detail for o in outcomes]
    out = run / "global_step_1" / "actor" / "huggingface"
    assert (out / "model.safetensors").is_file() and not (out / "generation_config.json").exists()
    assert json.loads((out / "config.json").read_text())["model_type"] == "mymodel"
