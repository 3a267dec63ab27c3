"""A role logs to wandb through a service of its own, whatever wandb service its parent used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from pathlib import Path
from rfthpc.config.monitor import MonitorConfig
from rfthpc.observe.monitor import Monitor
from rfthpc.rundir.paths import RunDir

run = RunDir(Path(sys.argv[1])).create()
monitor = Monitor(run, "trainer", MonitorConfig(monitor_type=["wandb"], wandb_mode="offline"), "p", "n")
monitor.log({"x": 1.0}, step=1)
monitor.close()
print("logged")
"""


def test_an_inherited_wandb_service_is_not_used(tmp_path: Path) -> None:
    """Slurm exports the submitter's environment: a WANDB_SERVICE of the process that submitted (a
    notebook, the test runner) names a service that is not this role's (here: a socket that does
    not exist, as on another machine). The role starts its own and logs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true",
           "WANDB_SERVICE": f"3-{os.getpid()}-unix-{tmp_path / 'no-such-socket'}"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "run")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "logged"
    assert list((tmp_path / "run" / "monitor" / "wandb" / "wandb").glob("offline-run-*"))
