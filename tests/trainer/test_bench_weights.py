"""tools/bench_weights.py runs end to end on a small model and ends with the FIGURES line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "tools" / "bench_weights.py"


@pytest.mark.slow
def test_bench_weights_prints_the_figures_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--size", "small", "--versions", "4", "--no-vllm", "--work", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    last = out.strip().splitlines()[-1]
    assert last.startswith("FIGURES "), out[-2000:]
    figures = dict(item.split("=", 1) for item in last.split()[1:])
    assert figures["bitexact"] == "1", last
    assert 0 < float(figures["delta_bytes_vs_full"]) < 0.5, last
    assert float(figures["publish_s_vs_full"]) > 0 and float(figures["explorer_stall_vs_cold_load"]) > 0, last
    # Run D's explorer linked every version (the bench checks it) from the trainer's node-local copies.
    assert float(figures["node_local_prefetch_vs_run_dir"]) > 0 and float(figures["node_local_publish_s_vs_run_dir"]) > 0
    # A rank-16 adapter of the 3M-parameter `small` model: 0.63 MB of a 6.8 MB snapshot (measured).
    assert 0 < int(figures["lora_bytes_per_sync"]) < int(figures["full_bytes_per_sync"]) / 5, last
    assert float(figures["lora_bytes_vs_full"]) == pytest.approx(
        int(figures["lora_bytes_per_sync"]) / int(figures["full_bytes_per_sync"]), rel=1e-3), last
