"""tools/sim_scale.py runs end to end on a few explorers and ends with the FIGURES line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SIM = Path(__file__).parents[2] / "tools" / "sim_scale.py"


@pytest.mark.slow
def test_sim_scale_prints_the_figures_line_and_loses_nothing(tmp_path: Path) -> None:
    """Six explorers over two claim shards with 1 ms per metadata operation: every committed group
    is trained exactly once."""
    out = subprocess.run(
        [sys.executable, str(SIM), "--n", "6", "--seconds", "6", "--latency-ms", "1", "--gen-median-s", "0.3",
         "--claim-shards", "2", "--claim-batches", "2", "--max-chunk-delay", "0.5", "--work", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    last = out.strip().splitlines()[-1]
    assert last.startswith("FIGURES "), out[-2000:]
    figures = dict(item.split("=", 1) for item in last.split()[1:])
    assert figures["lost"] == "0" and figures["twice"] == "0", last
    assert float(figures["claims_per_s_6"]) > 0 and float(figures["reader_groups_per_s_6"]) > 0, last
    assert float(figures["metaops_per_s_6"]) > 0, last
