"""Shared fixtures of the store tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """An empty run directory, as `rfthpc submit` leaves it before any role starts."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("mode: both\n")
    return run
