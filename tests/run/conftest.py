"""Shared pieces of the `rfthpc run` tests: the demo's model and data, configs, CLI processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEMO_CONFIG = ROOT / "configs" / "tiny-cpu.yaml"


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's model and data (`rfthpc make-demo`, seed 0)."""
    from rfthpc.demos.gsm8k import MakeDemoArgs, make_demo

    out = tmp_path_factory.mktemp("demo-data")
    make_demo(MakeDemoArgs(out=out, seed=0))
    return out


def env_for(demo: Path, root: Path) -> dict[str, str]:
    """The environment a run of the demo config needs: where its data is and where runs go."""
    return {**os.environ, "RFTHPC_DEMO_DIR": str(demo), "RFTHPC_CHECKPOINT_ROOT_DIR": str(root),
            "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true"}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def demo_variant(path: Path, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> Path:
    """Write configs/tiny-cpu.yaml with `changes` merged in and top-level keys `drop` removed."""
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    for key in drop:
        raw.pop(key, None)
    path.write_text(yaml.safe_dump(_merge(raw, changes), sort_keys=False))
    return path


def rl_only(path: Path, name: str, mode: str = "both", steps: int = 4, **changes: Any) -> Path:
    """A short RL-only variant of the demo config (transformers engine, no eval, no SFT stage).

    The engine and the budgets are small because these tests are about the processes, not learning.
    """
    base = {
        "name": name, "mode": mode,
        "algorithm": {"repeat_times": 4},
        "buffer": {"total_steps": steps, "batch_size": 4,
                   "explorer_input": {"eval_tasksets": []},
                   "trainer_input": {"experience_buffer": {"max_read_timeout": 300.0}}},
        "explorer": {"rollout_model": {"engine_type": "transformers"}, "runner_per_model": 4},
        "synchronizer": {"sync_interval": 1, "sync_offset": 0, "sync_timeout": 300.0},
        "trainer": {"save_interval": 2, "save_hf_checkpoint": "never"},
        "monitor": {"monitor_type": []},
        "filesystem": {"poll_interval_s": 0.2},
    }
    return demo_variant(path, _merge(base, changes), drop=("stages",))


def rfthpc(*args: str, env: dict[str, str], **kwargs: Any) -> subprocess.Popen[str]:
    """Start `python -m rfthpc ARGS` with its output captured."""
    return subprocess.Popen([sys.executable, "-m", "rfthpc", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    """Wait for `proc`; (exit code, stdout, stderr). A process that hangs is killed and the test fails."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{proc.args} did not finish within {timeout} s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}")
    return proc.returncode, out, err


def store_counts(run_dir: Path) -> dict[str, Any]:
    """Group counts of a run's experience store and the task-claim progress of its tasksets."""
    from rfthpc.store import inspect_store

    info = inspect_store(run_dir)
    return {**info["counts"], "tasksets": info["tasksets"]}


def monitor_records(run_dir: Path, role: str = "trainer") -> list[dict[str, Any]]:
    """The metric records a role wrote to `monitor/<role>.jsonl` (`explorer_explorer_0` for the first explorer)."""
    return [json.loads(line) for line in (Path(run_dir) / "monitor" / f"{role}.jsonl").read_text().splitlines()]
