"""Shared fixtures for the explorer tests: one tiny model per session (building takes ~1 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.demos.tinymodel import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tied-embedding `tiny` Qwen2 model directory (seed 0)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"), "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model: Path):
    """The tiny model's tokenizer, loaded through transformers."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)
