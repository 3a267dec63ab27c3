"""tools/chaos.py on the local Slurm cluster: a short soak ends with a complete, audited run.

The run directory is on the cluster's shared filesystem, the trainer on n1 and the explorers on the
other nodes: every hand-off between them crosses two clients of it, as on a cluster.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

CHAOS = Path(__file__).parents[2] / "tools" / "chaos.py"
FIGURES = re.compile(r"^FIGURES faults=(\d+) groups_lost=(\d+) groups_trained_twice=(\d+) run_completed=([01]) "
                     r"unexplained_quarantined=(\d+) wall_s=(\d+)$")
PLACED = re.compile(r"^roles on nodes: trainer (\S+); explorers (\S+)$", re.M)


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_short_soak_loses_nothing_and_trains_nothing_twice(node_clients: dict[str, int], shared_dir: Path) -> None:
    """40 steps with a fault every 4-8 s from the first step on (the budget is a bound, not the expected
    time: on a busy machine the run takes longer and sees more faults)."""
    out = subprocess.run(
        [sys.executable, str(CHAOS), "--seed", "3", "--steps", "40", "--interval", "4", "8",
         "--max-minutes", "15", "--dir", str(shared_dir), "--trainer-node", "n1"],
        capture_output=True, text=True, timeout=1150, check=False,
    )
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    m = FIGURES.match(last)
    assert out.returncode == 0 and m, out.stdout[-3000:] + out.stderr[-3000:]
    faults, lost, twice, completed, unexplained, _ = (int(v) for v in m.groups())
    assert faults >= 1 and (lost, twice, completed, unexplained) == (0, 0, 1, 0), out.stdout[-3000:]
    placed = PLACED.search(out.stdout)
    assert placed and placed[1] == "n1" and "n1" not in placed[2].split(","), out.stdout[-3000:]
