"""`rfthpc convert` on a LoRA run: the adapter merged into the base is a plain Hugging Face model with
the PeftModel's outputs; `--adapter-only` exports the adapter as the trainer published it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rfthpc.rundir.paths import RunDir
from rfthpc.weights import published as weights
from tests.trainer.conftest import make_run, run_trainer_inprocess, write_groups
from tests.trainer.test_lora import lora_config

REPO = Path(__file__).resolve().parents[2]
STEPS = 2


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory, tiny_base: Path) -> RunDir:
    """A LoRA run trained for 2 steps (its adapter far from zero), checkpointed at the end."""
    cfg = lora_config(tiny_base, **{"buffer.total_steps": STEPS, "algorithm.optimizer.lr": 0.05})
    run = make_run(tmp_path_factory.mktemp("lora_run") / "run", cfg)
    write_groups(run, 2 * STEPS)
    assert run_trainer_inprocess(run) == 0
    return run


def convert(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rfthpc", "convert", "--no-progress", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_convert_merges_the_adapter_into_a_plain_model_with_the_peft_models_outputs(
        lora_run: RunDir, tiny_base: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = RunDir(shutil.copytree(lora_run.root, tmp_path / "run"))
    out = convert("--checkpoint-dir", str(run.root))
    assert out.returncode == 0, out.stderr
    merged_dir = run.checkpoint(STEPS) / "actor" / "huggingface"
    assert "LoRA adapter (rank 8" in out.stdout and str(merged_dir) in out.stdout
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    assert not any("lora" in k for k in merged.state_dict())
    # The PeftModel the explorers ran: the base with the adapter the trainer published at that step.
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32),
                                     weights.step_dir(run.root, STEPS)).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    ids = torch.arange(3, 40).view(1, -1)
    assert torch.allclose(_logits(merged, ids), _logits(peft, ids), atol=1e-5)
    assert (_logits(merged, ids) - _logits(base, ids)).abs().max() > 1e-3


def test_adapter_only_exports_the_adapter_as_the_trainer_published_it(lora_run: RunDir, tmp_path: Path) -> None:
    run = RunDir(shutil.copytree(lora_run.root, tmp_path / "run"))
    out = convert("--checkpoint-dir", str(run.checkpoint(STEPS)), "--adapter-only")
    assert out.returncode == 0, out.stderr
    exported = run.checkpoint(STEPS) / "actor" / "lora_adapter"
    assert sorted(p.name for p in exported.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    published = weights.step_dir(run.root, STEPS)
    got, want = load_file(str(exported / "adapter_model.safetensors")), load_file(
        str(published / "adapter_model.safetensors"))
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert json.loads((exported / "adapter_config.json").read_text()) == \
        json.loads((published / "adapter_config.json").read_text())
    again = convert("--checkpoint-dir", str(run.checkpoint(STEPS)), "--adapter-only")
    assert again.returncode == 0 and "already converted" in again.stdout


def test_merging_without_the_base_model_names_the_option(lora_run: RunDir, tmp_path: Path) -> None:
    run = RunDir(shutil.copytree(lora_run.root, tmp_path / "run"))
    config = run.checkpoint(STEPS) / "actor" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": "/gone/model"}))
    out = convert("--checkpoint-dir", str(run.root))
    assert out.returncode == 2
    assert "holds a LoRA adapter" in out.stderr and "--base-model-dir" in out.stderr
    assert not (run.checkpoint(STEPS) / "actor" / "huggingface").exists()
