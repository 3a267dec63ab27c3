"""Tiny models shared by the engine tests (built offline once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~0.1M-parameter Qwen2 with tied embeddings (like Qwen2.5-0.5B/1.5B)."""
    from rfthpc.demos.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_untied_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same shape with a separate output layer (like Qwen2.5-7B)."""
    from rfthpc.demos.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_untied"), "tiny", seed=0, tie_word_embeddings=False)
