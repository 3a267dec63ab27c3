"""tools/bench_store.py runs end to end on a small load and ends with the FIGURES line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "tools" / "bench_store.py"
FIGURES = re.compile(
    r"^FIGURES write_vs_raw=(\S+) write_vs_sqlite=(\S+) read_groups_per_s=(\S+) visible_p50_s=(\S+) "
    r"visible_p99_s=(\S+) files_per_1000_groups=(\S+)$"
)


@pytest.mark.slow
def test_bench_prints_the_figures_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--groups", "96", "--writers", "3", "--responses", "2", "--tokens", "64",
         "--groups-per-chunk", "16", "--repeat", "1", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    last = out.strip().splitlines()[-1]
    m = FIGURES.match(last)
    assert m, last
    values = [float(v) for v in m.groups()]
    assert all(v > 0 for v in values), last
    # 96 groups in chunks of 16 from 3 writers: 2 chunks each, a ring of the doorbell per chunk (empty files
    # under new names), and the store marker = 13 files
    assert values[5] == pytest.approx(1000 * 13 / 96, abs=0.1)
