"""Shared fixtures of the converter tests: one tiny model and one set of real 2-rank checkpoints."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rfthpc.demos.tinymodel import build_tiny_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tied-embedding `tiny` Qwen2 the checkpoints start from."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_base"), "tiny", seed=0)


@pytest.fixture(scope="session")
def made(tmp_path_factory: pytest.TempPathFactory, tiny_base: Path) -> Path:
    """Checkpoints of actor and critic after one FSDP2 step on 2 gloo ranks, in both formats.

    `made/rfthpc/global_step_1/<role>/`, `made/verl/global_step_1/<role>/` and the full weights
    `made/reference_<role>.safetensors`. Tests copy what they modify (see `copy_run`).
    """
    out = tmp_path_factory.mktemp("made")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.convert.make_checkpoints",
            "--base",
            str(tiny_base),
            "--out",
            str(out),
            "--world-size",
            "2",
            "--roles",
            "actor,critic",
            "--formats",
            "rfthpc,verl",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.fixture
def copy_run(made: Path, tmp_path: Path):
    """`copy_run("rfthpc")` -> a private copy of that format's run directory."""

    def copy(fmt: str) -> Path:
        dest = tmp_path / fmt
        shutil.copytree(made / fmt, dest)
        return dest

    return copy


def reference(made: Path, role: str = "actor") -> dict[str, torch.Tensor]:
    """The full trained weights rank 0 gathered, by name (a tied lm_head included)."""
    from safetensors.torch import load_file

    return load_file(made / f"reference_{role}.safetensors")


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory, tiny_base: Path) -> Path:
    """A run directory after `rfthpc train` on 2 ranks (torchrun, gloo, FSDP2): 2 GRPO steps.

    The trainer saved `global_step_2/actor/` with its own merged copy in `huggingface/`
    (`trainer.save_hf_checkpoint: last`), made from the full weights it gathered.
    """
    from tests.trainer.conftest import make_run, rl_config, start_trainer, write_groups

    cfg = rl_config(tiny_base, **{"buffer.total_steps": 2, "trainer.save_hf_checkpoint": "last"})
    run = make_run(tmp_path_factory.mktemp("trained") / "run", cfg)
    write_groups(run, 4)
    proc = start_trainer(run, nproc=2)
    assert proc.wait(timeout=400) == 0, (run.log / "trainer.log").read_text()[-3000:]
    return run.root
