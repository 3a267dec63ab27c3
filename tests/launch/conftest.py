"""Fixtures of the launch tests: a tiny model and data, tiny configs, bounded waits.

Everything runs against the real cluster of tools/local_slurm.sh (three virtual nodes n1-n3, accounting
on; the `slurm_cluster` fixture of tests/conftest.py) with the real `rfthpc` command in subprocesses.
No wait on a Slurm state or a run directory is unbounded.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from rfthpc.launch.torchrun import expand_nodelist

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
T = TypeVar("T")

#: `slurm` keys that put the trainer's first node (its rank 0) on n1 and every explorer on another node:
#: the roles then hand experience and weights to each other through different clients of the shared
#: filesystem the cluster's nodes mount (tests/conftest.py).
APART = {"trainer": {"additional_parameters": {"nodelist": "n1"}},
         "explorer": {"additional_parameters": {"exclude": "n1"}}}
TERMINAL = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT"}


def run_cmd(*args: str, timeout: float = 60, env: dict[str, str] | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run a command with captured text output and a timeout (a hung Slurm tool fails the test)."""
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=check,
                          env=None if env is None else {**os.environ, **env}, cwd=REPO)


def rfthpc(*args: str, timeout: float = 180, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real `rfthpc` command line (`python -m rfthpc ...`)."""
    return run_cmd(PYTHON, "-m", "rfthpc", *args, timeout=timeout, env=env)


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 1.0,
             details: Callable[[], str] | None = None) -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds, with the
    text of `details()` (job states, log tails) in the failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}" + (f"\n{details()}" if details else ""))
        time.sleep(interval)


def sacct_states(job_id: str, steps: bool = False) -> dict[str, str]:
    """Sub-id (`12`, `12_0`, `12+1`; with `steps` also `12.batch`, `12.0`) → state (first word), from accounting."""
    out = run_cmd("sacct", "-n", *([] if steps else ["-X"]), "-P", "-j", job_id, "-o", "JobID,State").stdout
    states = {}
    for line in out.splitlines():
        sub, _, state = line.partition("|")
        if sub and "[" not in sub:
            states[sub] = state.split()[0] if state else "UNKNOWN"
    return states


def wait_terminal(job_id: str, timeout: float, n_rows: int = 1) -> dict[str, str]:
    """Wait until `n_rows` rows of the job are in a terminal state; return them."""
    def done() -> dict[str, str] | None:
        states = sacct_states(job_id)
        return states if len(states) >= n_rows and all(s in TERMINAL for s in states.values()) else None
    return wait_for(done, timeout, f"job {job_id} to finish")


def job_nodes(job_id: str) -> dict[str, list[str]]:
    """Sub-id (`12`, `12_0`) → the nodes it ran on, from accounting."""
    out = run_cmd("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,NodeList").stdout
    nodes = {}
    for line in out.splitlines():
        sub, _, node_list = line.partition("|")
        if sub and "[" not in sub and node_list not in ("", "None assigned"):
            nodes[sub] = expand_nodelist(node_list)
    return nodes


def scontrol_field(job_id: str, field: str) -> str:
    """One `Key=value` field of `scontrol show job` (empty if the job is gone)."""
    out = run_cmd("scontrol", "show", "job", "-o", job_id).stdout
    for word in out.split():
        if word.startswith(f"{field}="):
            return word.split("=", 1)[1]
    return ""


def cluster_report() -> str:
    """Every job Slurm lists (state, why it pends, name) and every node's state, for failure messages:
    a run that never starts is told apart from one that hangs."""
    jobs = run_cmd("squeue", "-h", "-o", "%i %T %r %j").stdout
    nodes = run_cmd("sinfo", "-h", "-N", "-o", "%N %P %t load=%O free_mem=%e %E").stdout
    return f"--- squeue\n{jobs}--- sinfo\n{nodes}"


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model (`model/`), synthetic GSM8K-format data (`gsm8k/{train,test}.jsonl`) and `sft.jsonl`."""
    from rfthpc.demos.synth_gsm8k import generate_splits, sft_records, write_jsonl, write_splits
    from rfthpc.demos.tinymodel import build_tiny_model

    root = tmp_path_factory.mktemp("demo")
    build_tiny_model(root / "model", "tiny", seed=0)
    splits = generate_splits(400, 20, seed=0)
    write_splits(root / "gsm8k", splits, "jsonl")
    write_jsonl(root / "sft.jsonl", sft_records(splits["train"]))
    return root


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def tiny_config(data: Path, run_root: Path, name: str, **sections: Any) -> dict[str, Any]:
    """A tiny CPU run (GRPO, transformers engine, 2 explorers, 4 steps); `sections` are merged over it."""
    base = {
        "project": "launch",
        "name": name,
        "checkpoint_root_dir": str(run_root),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-4}},
        "model": {"model_path": str(data / "model"), "max_prompt_tokens": 96, "max_response_tokens": 12,
                  "dtype": "float32"},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "total_epochs": 1, "total_steps": 4, "batch_size": 4,
            "explorer_input": {
                "taskset": {"name": "arith", "path": str(data / "gsm8k"), "split": "train",
                            "format": {"prompt_key": "question", "response_key": "answer"}},
                "default_workflow_type": "math_workflow",
            },
        },
        "explorer": {"eval_on_startup": False, "runner_per_model": 4,
                     "rollout_model": {"engine_type": "transformers", "engine_num": 2}},
        "synchronizer": {"sync_interval": 1, "sync_offset": 4},
        "trainer": {"save_interval": 1, "use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 16},
        "monitor": {"monitor_type": ["console"]},
        # tests.launch.runcheck reads every consumed group back at the end.
        "filesystem": {"keep_consumed_chunks": True},
        "slurm": {
            "signal_delay_s": 30,
            "trainer": {"time": "00:20:00", "cpus_per_task": 1, "mem": "3G"},
            "explorer": {"time": "00:20:00", "cpus_per_task": 1, "mem": "2G"},
        },
    }
    return _merge(base, sections)


def judged_config(data: Path, run_root: Path, name: str, **sections: Any) -> dict[str, Any]:
    """The tiny run (transformers policy), scored by a shared judge: the tiny model on vLLM's server."""
    judge = {"name": "judge", "model_path": str(data / "model"), "max_model_len": 1600, "max_prompt_tokens": 1536,
             "max_response_tokens": 6, "cpu_kvcache_space_gb": 1, "server_timeout": 600}
    judged = {"buffer": {"explorer_input": {"default_workflow_type": "math_rm_workflow"}},
              "explorer": {"auxiliary_models": [judge]},
              "slurm": {"server": {"time": "00:20:00", "cpus_per_task": 1, "mem": "3G"}}}
    return tiny_config(data, run_root, name, **_merge(judged, sections))


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    """Write a config file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
