"""The hand-written sbatch templates in slurm/: valid bash, usage in the header, no credentials.

They are submitted for real in test_e2e.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

TEMPLATES = sorted((Path(__file__).resolve().parents[2] / "slurm").glob("*.sbatch"))


def test_every_template_is_there() -> None:
    assert [p.name for p in TEMPLATES] == ["add_explorers.sbatch", "explorer.sbatch", "hetjob.sbatch",
                                           "trainer.sbatch"]


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_template_parses_and_documents_its_usage(path: Path) -> None:
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30, check=False)
    assert check.returncode == 0, check.stderr
    text = path.read_text()
    header = text.split("#SBATCH", 1)[0]
    assert "# Usage:" in header and "sbatch " in header and f"slurm/{path.name}" in header
    assert "--signal=B:USR2@" in text and "--requeue" in text and "umask 077" in text
    assert "WANDB_API_KEY=" not in text and "HF_TOKEN=" not in text
