"""The `rfthpc` command line, run as users run it (a subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rfthpc(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run `python -m rfthpc ARGS` and capture its output."""
    return subprocess.run([sys.executable, "-m", "rfthpc", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_help_lists_commands() -> None:
    out = rfthpc("--help")
    assert out.returncode == 0 and "config" in out.stdout


def test_config_help_documents_every_flag_from_docstrings() -> None:
    out = rfthpc("config", "show", "--config", "configs/grpo.yaml", "--help")
    assert out.returncode == 0, out.stderr
    assert "--algorithm.optimizer.lr" in out.stdout and "Peak learning rate" in out.stdout
    assert "--slurm.trainer.partition" in out.stdout


def test_show_applies_overrides_and_prints_yaml(tmp_path: Path) -> None:
    out = rfthpc("config", "show", "--no-path-checks", "--config", "configs/grpo.yaml", "--buffer.batch_size", "32")
    assert out.returncode == 0, out.stderr
    assert "batch_size: 32" in out.stdout and "train_batch_size: 256" in out.stdout


def test_bad_config_exits_2_with_a_message_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm:\n  algorithm_typ: grpo\n")
    out = rfthpc("config", "validate", "--config", str(bad))
    assert out.returncode == 2
    assert "algorithm.algorithm_typ: unknown key; did you mean 'algorithm.algorithm_type'" in out.stderr
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == [bad]  # nothing created


def test_validate_names_stages(tmp_path: Path) -> None:
    out = rfthpc("config", "validate", "--no-path-checks", "--config", "configs/tiny-cpu.yaml")
    assert out.returncode == 0, out.stderr
    assert "2 stages: sft_warmup, rft" in out.stdout
