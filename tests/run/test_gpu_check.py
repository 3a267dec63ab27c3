"""tools/gpu_check.sh, the check run on GPU machines, runs its whole path on CPU too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_gpu_check_runs_on_cpu() -> None:
    """Trainer steps (FSDP2, one rank, padding-free), full and delta publishing, rollouts with prefetched
    weights, a checkpoint conversion and a materialized version; the same with a LoRA adapter (adapter
    publications, a merging conversion); with 2 trainer ranks at sequence parallel size 2; the trainer beside a
    vLLM engine (the colocated leg), and taking turns with it (sleep mode); then the FIGURES line."""
    result = subprocess.run(["bash", str(REPO / "tools" / "gpu_check.sh")], cwd=REPO, capture_output=True, text=True, check=False,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("FIGURES "), result.stdout[-2000:]
    figures = dict(item.split("=", 1) for item in last.split()[1:])
    assert figures["device"] == "cpu" and figures["dtype"] == "float32"
    assert int(figures["deltas"]) >= 2 and int(figures["full_snapshots"]) >= 1
    assert int(figures["lora_adapters"]) >= 2 and 0 < int(figures["lora_bytes_per_sync"]) < 10**6
    for key in ("step_time_s", "train_tokens_per_s", "rollout_tokens_per_s", "weight_stall_s", "convert_s",
                "lora_step_time_s", "sp2_step_time_s", "colocated_step_time_s", "colocated_rollout_tokens_per_s",
                "sleep_step_time_s", "sleep_rollout_tokens_per_s"):
        assert float(figures[key]) > 0, (key, last)
    assert int(figures["sleep_turns"]) >= 4 and float(figures["sleep_turn_wait_s"]) >= 0
