"""Fixtures for config tests: local stand-ins for the paths the seed configs name."""

from __future__ import annotations

from pathlib import Path

import pytest

SEEDS = Path(__file__).parent / "seeds"
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture
def local_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point TRINITY_* and HOME at existing local directories, as a user would after downloading.

    Path checks only ask whether the model / dataset exists locally, so empty directories stand in
    for them; loading their contents is tested with the explorer and trainer.
    """
    model = tmp_path / "models" / "Qwen2.5-1.5B-Instruct"
    data = tmp_path / "data" / "gsm8k"
    for d in (model, data, tmp_path / "models" / "Qwen2-7B-Instruct", tmp_path / "models" / "FsfairX-LLaMA3-RM-v0.1",
              tmp_path / "data" / "math"):
        d.mkdir(parents=True)
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model))
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(data))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    """Write a YAML config into tmp_path and return its path."""
    p = tmp_path / name
    p.write_text(text)
    return p
