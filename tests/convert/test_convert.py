"""Real 2-rank FSDP2 checkpoints (rfthpc DCP and veRL/Trinity-RFT) -> Hugging Face directories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from rfthpc.cli import main as rfthpc_main
from rfthpc.convert.merge import ConvertOptions, convert_checkpoints
from rfthpc.convert.rfthpc_dcp import DcpCheckpoint
from rfthpc.errors import UserError
from tests.convert.conftest import REPO, reference


def _load(hf_dir: Path, role: str = "actor"):
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    cls = AutoModelForCausalLM if role == "actor" else AutoModelForTokenClassification
    return cls.from_pretrained(hf_dir)


def _assert_equal_state(model, ref: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> None:
    state = model.state_dict()
    assert set(state) == set(ref)
    for k, v in ref.items():
        assert state[k].dtype == dtype, k
        assert torch.equal(state[k], v.to(dtype)), k


@pytest.mark.parametrize("fmt", ["rfthpc", "verl"])
def test_converted_actor_loads_in_transformers_with_exactly_the_trained_weights(
    fmt: str, copy_run, made: Path, tiny_base: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(fmt)
    assert rfthpc_main(["convert", "--checkpoint-dir", str(run), "--no-progress"]) == 0
    hf = run / "global_step_1" / "actor" / "huggingface"
    assert f"{hf.parent}: converted:" in capsys.readouterr().out
    ref = reference(made)
    base = _load(tiny_base).state_dict()
    assert not torch.equal(ref["model.norm.weight"], base["model.norm.weight"])  # the step changed the weights
    _assert_equal_state(_load(hf), ref)
    with safe_open(hf / "model.safetensors", framework="pt") as st:
        assert "lm_head.weight" not in set(st.keys())  # tied to the embedding, as save_pretrained writes it
    for name in (
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ):
        assert (hf / name).is_file(), name
    assert json.loads((hf / "config.json").read_text())["dtype"] == "float32"
    assert not [p for p in hf.parent.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("fmt", ["rfthpc", "verl"])
def test_critic_on_request_with_every_role(fmt: str, copy_run, made: Path) -> None:
    run = copy_run(fmt)
    outcomes = convert_checkpoints(run, ConvertOptions(roles=("actor", "critic"), progress=False))
    assert [o.status for o in outcomes] == ["converted", "converted"]
    hf = run / "global_step_1" / "critic" / "huggingface"
    # rfthpc's critic keeps the causal-LM config it was built from; the output names the value model.
    assert json.loads((hf / "config.json").read_text())["architectures"] == ["Qwen2ForTokenClassification"]
    _assert_equal_state(_load(hf, "critic"), reference(made, "critic"))


def test_actor_only_by_default(copy_run) -> None:
    run = copy_run("rfthpc")
    convert_checkpoints(run, ConvertOptions(progress=False))
    assert (run / "global_step_1" / "actor" / "huggingface").is_dir()
    assert not (run / "global_step_1" / "critic" / "huggingface").exists()


def test_sharded_output_with_index_in_bf16(copy_run, made: Path) -> None:
    run = copy_run("rfthpc")
    assert (
        rfthpc_main(
            ["convert", "--checkpoint-dir", str(run), "--dtype", "bf16", "--max-shard-size", "100kB", "--no-progress"]
        )
        == 0
    )
    hf = run / "global_step_1" / "actor" / "huggingface"
    index = json.loads((hf / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3
    assert all((hf / f).stat().st_size <= 100_000 for f in set(index["weight_map"].values()))
    assert json.loads((hf / "config.json").read_text())["dtype"] == "bfloat16"
    _assert_equal_state(_load(hf), reference(made), torch.bfloat16)


@pytest.mark.parametrize("inside", ["", "global_step_1", "global_step_1/actor", "global_step_1/actor/model"])
def test_run_dir_step_dir_and_paths_inside_a_step_are_understood(copy_run, inside: str) -> None:
    run = copy_run("rfthpc")
    outcomes = convert_checkpoints(run / inside, ConvertOptions(progress=False))
    assert [(o.role_dir, o.status) for o in outcomes] == [(run / "global_step_1" / "actor", "converted")]


def test_every_step_of_every_run_below_a_directory_is_converted_once(copy_run) -> None:
    run = copy_run("verl")
    os.rename(run / "global_step_1", run / "global_step_10")
    copy_run("rfthpc")
    outcomes = convert_checkpoints(run.parent, ConvertOptions(progress=False))
    assert sorted((o.role_dir.parent.parent.name, o.role_dir.parent.name, o.status) for o in outcomes) == [
        ("rfthpc", "global_step_1", "converted"),
        ("verl", "global_step_10", "converted"),
    ]
    again = convert_checkpoints(run.parent, ConvertOptions(progress=False))
    assert {o.status for o in again} == {"skipped"}


def test_idempotent_unless_forced(copy_run, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run("verl")
    hf = run / "global_step_1" / "actor" / "huggingface"
    assert rfthpc_main(["convert", "--checkpoint-dir", str(run), "--no-progress"]) == 0
    first = (hf / "model.safetensors").stat().st_ino
    assert rfthpc_main(["convert", "--checkpoint-dir", str(run), "--no-progress"]) == 0
    assert "skipped" in capsys.readouterr().out
    assert (hf / "model.safetensors").stat().st_ino == first
    assert rfthpc_main(["convert", "--checkpoint-dir", str(run), "--force", "--no-progress"]) == 0
    assert (hf / "model.safetensors").stat().st_ino != first
    # veRL's own huggingface/ files (config, tokenizer) survive the replacement.
    assert (hf / "tokenizer.json").is_file() and (hf / "config.json").is_file()
    assert [p.name for p in hf.parent.iterdir() if p.name.startswith(".tmp-")] == []


def test_base_model_dir_supplies_a_missing_config(copy_run, made: Path, tiny_base: Path) -> None:
    run = copy_run("rfthpc")
    for p in (run / "global_step_1" / "actor" / "hf_config").iterdir():
        p.unlink()
    with pytest.raises(UserError, match=r"global_step_1/actor.*--base-model-dir"):
        convert_checkpoints(run, ConvertOptions(progress=False))
    assert not (run / "global_step_1" / "actor" / "huggingface").exists()
    convert_checkpoints(run, ConvertOptions(base_model_dir=tiny_base, progress=False))
    hf = run / "global_step_1" / "actor" / "huggingface"
    assert (hf / "tokenizer.json").read_bytes() == (tiny_base / "tokenizer.json").read_bytes()
    _assert_equal_state(_load(hf), reference(made))


@pytest.mark.parametrize("direct", [True, False])
def test_dcp_reader_gives_row_blocks_directly_or_whole_tensors_through_dcp(made: Path, direct: bool) -> None:
    source = DcpCheckpoint(made / "rfthpc" / "global_step_1" / "actor", direct=direct)
    names = [t.name for t in source.tensors()]
    ref = reference(made)
    seen = []
    for name, pieces in source.read(names):
        seen.append(name)
        blocks = list(pieces)
        assert len(blocks) == (2 if direct and ref[name].dim() > 0 else 1), name  # one block per rank
        assert torch.equal(torch.cat(blocks) if ref[name].dim() else blocks[0], ref[name]), name
    assert seen == names


def test_a_flat_dcp_state_dict_converts_too(made: Path, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    actor = tmp_path / "global_step_7" / "actor"
    ref = reference(made)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # saving without a process group is the point
        dcp.save(ref, checkpoint_id=actor / "model", no_dist=True)
    shutil.copytree(made / "rfthpc" / "global_step_1" / "actor" / "hf_config", actor / "hf_config")
    (actor / "rfthpc_checkpoint.json").write_text(json.dumps({"step": 7, "dtype": "bfloat16"}))
    convert_checkpoints(tmp_path, ConvertOptions(progress=False))
    _assert_equal_state(_load(actor / "huggingface"), ref, torch.bfloat16)  # the recorded dtype is the default


def test_tool_script_converts_without_the_rfthpc_command(copy_run, made: Path) -> None:
    run = copy_run("verl")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "convert_checkpoint.py"),
            "--checkpoint-dir",
            str(run / "global_step_1" / "actor"),
            "--dtype",
            "fp16",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=run,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "global_step_1/actor: 100%" in proc.stderr  # the progress bar
    _assert_equal_state(_load(run / "global_step_1" / "actor" / "huggingface"), reference(made), torch.float16)
