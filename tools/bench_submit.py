"""Time from `rfthpc submit` to the first committed experience group and to the first trainer step.

Usage:
    bash tools/local_slurm.sh up                     # the local two-node cluster
    .venv/bin/python tools/bench_submit.py [--engine vllm|transformers] [--explorers 2] [--repeats 1]

Builds a tiny model and synthetic GSM8K-format data in a temporary directory, submits a tiny GRPO
run (separate layout: a trainer job and an explorer array) with the real `rfthpc submit`, and
polls the run directory: the explorers' progress files for the first committed group,
the trainer's report (`trainer_meta/`) for the first step. The run is cancelled once both are seen. What the figures
hold: Slurm scheduling (~1 s here), Python and torch imports, engine start (vLLM on CPU: 10-20 s),
the first rollouts and the first optimizer step; on a loaded 2-core machine they vary by ±30 %.
The last line is `FIGURES submit_to_first_group_s=… submit_to_first_step_s=…` (medians).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.1
TIMEOUT_S = 600.0


def build_inputs(root: Path) -> None:
    """The tiny model and the synthetic data the run reads."""
    from rfthpc.demos.synth_gsm8k import generate_splits, write_splits
    from rfthpc.demos.tinymodel import build_tiny_model

    build_tiny_model(root / "model", "tiny", seed=0)
    write_splits(root / "gsm8k", generate_splits(400, 20, seed=0), "jsonl")


def config(root: Path, name: str, engine: str, explorers: int) -> Path:
    """A tiny GRPO run of 20 steps on the local cluster."""
    data = {
        "project": "bench-submit", "name": name, "checkpoint_root_dir": str(root / "runs"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "model": {"model_path": str(root / "model"), "max_prompt_tokens": 96, "max_response_tokens": 12,
                  "dtype": "float32"},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"total_steps": 20, "batch_size": 4, "explorer_input": {
            "taskset": {"name": "arith", "path": str(root / "gsm8k"), "split": "train",
                        "format": {"prompt_key": "question", "response_key": "answer"}},
            "default_workflow_type": "math_workflow"}},
        "explorer": {"eval_on_startup": False, "runner_per_model": 4,
                     "rollout_model": {"engine_type": engine, "engine_num": explorers, "dtype": "float32",
                                       "cpu_kvcache_space_gb": 1}},
        "synchronizer": {"sync_interval": 1, "sync_offset": 1},
        "trainer": {"save_interval": 0, "use_dynamic_bsz": False},
        "monitor": {"monitor_type": ["jsonl"]},
        "slurm": {"trainer": {"time": "00:20:00", "cpus_per_task": 1, "mem": "3G"},
                  "explorer": {"time": "00:20:00", "cpus_per_task": 1, "mem": "2G"}},
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _groups_committed(run: Path) -> int:
    total = 0
    for f in (run / "explorer_meta").glob("*/*.json"):
        try:
            total += int(json.loads(f.read_text()).get("groups_committed", 0))
        except (OSError, ValueError):
            continue
    return total


def _trainer_step(run: Path) -> int:
    from rfthpc.rundir.paths import RunDir
    from rfthpc.rundir.trainer_meta import read_trainer_meta

    meta = read_trainer_meta(RunDir(run))
    return 0 if meta is None else meta.step


def measure(cfg: Path, run: Path) -> tuple[float, float]:
    """Seconds from the start of `rfthpc submit` to the first group and to the first step."""
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "rfthpc", "submit", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    if out.returncode != 0:
        raise SystemExit(f"rfthpc submit failed:\n{out.stderr}")
    submitted = time.monotonic() - start
    first_group = first_step = None
    try:
        while first_group is None or first_step is None:
            now = time.monotonic() - start
            if now > TIMEOUT_S:
                raise SystemExit(f"no {'group' if first_group is None else 'trainer step'} within {TIMEOUT_S:.0f} s; "
                                 f"see the logs in {run / 'log'}")
            if first_group is None and _groups_committed(run) > 0:
                first_group = now
            if first_step is None and _trainer_step(run) >= 1:
                first_step = now
            time.sleep(POLL_S)
    finally:
        subprocess.run([sys.executable, "-m", "rfthpc", "cancel", str(run)], capture_output=True, text=True,
                       timeout=120, cwd=REPO, check=False)
    print(f"  submit returned after {submitted:.1f} s; first group at {first_group:.1f} s; "
          f"first trainer step at {first_step:.1f} s", flush=True)
    return first_group, first_step


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the FIGURES line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=["vllm", "transformers"], default="vllm", help="rollout engine")
    p.add_argument("--explorers", type=int, default=2, help="explorer array tasks")
    p.add_argument("--repeats", type=int, default=1, help="runs to take the median of")
    args = p.parse_args(argv)
    check = subprocess.run(["bash", str(REPO / "tools" / "local_slurm.sh"), "status"], capture_output=True,
                           text=True, timeout=120, check=False)
    if check.returncode != 0:
        raise SystemExit("the local Slurm cluster is not up: run `bash tools/local_slurm.sh up` first")
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as tmp:
        root = Path(tmp)
        build_inputs(root)
        groups, steps = [], []
        for i in range(args.repeats):
            name = f"run{i}"
            print(f"run {i + 1}/{args.repeats}: {args.engine} engine, {args.explorers} explorers", flush=True)
            g, s = measure(config(root, name, args.engine, args.explorers), root / "runs" / "bench-submit" / name)
            groups.append(g)
            steps.append(s)
    print(f"FIGURES submit_to_first_group_s={statistics.median(groups):.1f} "
          f"submit_to_first_step_s={statistics.median(steps):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
