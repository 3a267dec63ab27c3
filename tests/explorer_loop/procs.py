"""Starting `rfthpc explore` as its own process, as Slurm or `rfthpc run` does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def start_explorer(run_dir: Path, log_path: Path, rank: int = 0) -> subprocess.Popen:
    """`python -m rfthpc explore --run-dir R --rank K` with its output in `log_path`."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    argv = [sys.executable, "-m", "rfthpc", "explore", "--run-dir", str(run_dir), "--rank", str(rank)]
    # The child keeps its own copy of the file descriptor.
    with open(log_path, "wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, log_path: Path, timeout_s: float = 600.0) -> None:
    """Poll `condition` until it holds; fail with the explorer's log if it exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"explorer exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"condition not met in {timeout_s:.0f} s:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.2)


def finish(proc: subprocess.Popen, log_path: Path, timeout_s: float = 300.0) -> int:
    """Wait for the explorer to exit; return its exit code."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"explorer did not exit in {timeout_s:.0f} s:\n{log_path.read_text()[-4000:]}") from None
