"""Golden files of the sbatch scripts `rfthpc submit` and `add-explorers` generate.

Rendering needs no cluster. A change of the generated text fails here; if it is intended,
regenerate with `RFTHPC_UPDATE_GOLDEN=1 python -m pytest tests/launch/test_golden.py` and review
the diff of tests/launch/golden/.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from rfthpc.config import load_config, resolve_stages
from rfthpc.launch.explorer_config import merged_explorer_config
from rfthpc.launch.submission import explorer_plan, plan_jobs
from rfthpc.rundir.paths import RunDir

GOLDEN = Path(__file__).parent / "golden"
RUN = RunDir("/srv/runs/demo/tiny")
CODE = Path("/srv/runs/demo/tiny/slurm/code/0123456789abcdef")

BASE: dict[str, Any] = {
    "project": "demo",
    "name": "tiny",
    "checkpoint_root_dir": "/srv/runs",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
    "model": {"model_path": "/srv/models/tiny", "max_prompt_tokens": 64, "max_response_tokens": 16},
    "cluster": {"node_num": 1, "gpu_per_node": 0},
    "buffer": {"total_steps": 3, "batch_size": 4,
               "explorer_input": {"taskset": {"name": "arith", "path": "/srv/data/gsm8k", "split": "train"}}},
    "explorer": {"rollout_model": {"engine_num": 2}},
    "slurm": {
        "python": "/opt/venv/bin/python",
        "setup": ["module load cuda/12.4"],
        "trainer": {"partition": "debug", "account": "main", "time": "00:30:00", "nodes": 2, "cpus_per_task": 2,
                    "mem": "4G"},
        "explorer": {"partition": "debug", "time": "01:00:00", "cpus_per_task": 1, "mem": "2G",
                     "setup": ["export VLLM_CPU_KVCACHE_SPACE=1"]},
    },
}

GPU: dict[str, Any] = {
    **BASE,
    "cluster": {"node_num": 2, "gpu_per_node": 8},
    "explorer": {"rollout_model": {"engine_num": 4, "tensor_parallel_size": 2}},
    "slurm": {
        "python": "/opt/venv/bin/python",
        "trainer": {"partition": "gpu", "account": "proj42", "qos": "high", "time": "2-00:00:00", "nodes": 1,
                    "cpus_per_task": 64, "mem": "400G", "constraint": "h100", "exclusive": True,
                    "additional_parameters": {"reservation": "rl"}},
        "explorer": {"partition": "gpu", "account": "proj42", "time": "12:00:00", "cpus_per_task": 16,
                     "mem": "200G", "array_parallelism": 2},
    },
}


def _config(tmp_path: Path, data: dict[str, Any], layout: str):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**data, "slurm": {**data["slurm"], "layout": layout}}))
    return path, load_config(path, check_paths=False)


def _check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("RFTHPC_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run with RFTHPC_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{name} differs from its golden file (RFTHPC_UPDATE_GOLDEN=1 to accept)"


@pytest.mark.parametrize(("variant", "data"), [("cpu", BASE), ("gpu", GPU)])
@pytest.mark.parametrize("layout", ["separate", "hetjob"])
def test_submit_scripts(tmp_path: Path, variant: str, data: dict[str, Any], layout: str) -> None:
    _, loaded = _config(tmp_path, data, layout)
    plans = plan_jobs(loaded.config, [s.config.mode for s in loaded.stages], RUN, CODE)
    assert [p.kind for p in plans] == (["trainer", "explorer"] if layout == "separate" else ["hetjob"])
    for plan in plans:
        _check(f"{variant}-{layout}-{plan.script_name}", plan.render())


def test_add_explorers_script(tmp_path: Path) -> None:
    _, loaded = _config(tmp_path, BASE, "separate")
    new = tmp_path / "explorer_new.yaml"
    new.write_text(yaml.safe_dump({
        "explorer": {"name": "explorer_new", "rollout_model": {"engine_num": 3}},
        "slurm": {"explorer": {"partition": "other", "time": "00:45:00", "mem": "1G"}},
    }))
    cfg = merged_explorer_config(loaded.base, new, [], None, None, check_paths=False)
    plan = explorer_plan(resolve_stages(cfg)[-1].config, RUN, CODE)
    assert (plan.explorer, plan.array_size) == ("explorer_new", 3)
    _check("add-explorers.sbatch", plan.render())


def test_added_explorers_with_other_engines_get_their_own_gpus_and_size(tmp_path: Path) -> None:
    """The run set the explorers' GPUs and array size by hand; an added array with bigger engines gets
    what its engines need, not the run's values, unless its own slurm section says otherwise."""
    run = {**GPU, "cluster": {"node_num": 4, "gpu_per_node": 8},
           "slurm": {**GPU["slurm"], "explorer": {**GPU["slurm"]["explorer"], "gpus_per_node": 2, "array_size": 4}}}
    _, loaded = _config(tmp_path, run, "separate")
    new = tmp_path / "explorer_new.yaml"
    new.write_text(yaml.safe_dump({"explorer": {"name": "big", "rollout_model": {"engine_num": 2,
                                                                                 "tensor_parallel_size": 4}}}))
    plan = explorer_plan(_added(loaded.base, new), RUN, CODE)
    assert plan.array_size == 2 and "--gpus-per-node=4" in plan.render()
    new.write_text(yaml.safe_dump({"explorer": {"name": "big", "rollout_model": {"engine_num": 2,
                                                                                 "tensor_parallel_size": 4}},
                                   "slurm": {"explorer": {"gpus_per_node": 8}}}))
    plan = explorer_plan(_added(loaded.base, new), RUN, CODE)
    assert plan.array_size == 2 and "--gpus-per-node=8" in plan.render()


def _added(run_base: Any, new: Path) -> Any:
    """The finalized config of an added explorer array, as `rfthpc add-explorers` plans it."""
    return resolve_stages(merged_explorer_config(run_base, new, [], None, None, check_paths=False))[-1].config


def test_one_task_per_trainer_node_and_explorer(tmp_path: Path) -> None:
    _, loaded = _config(tmp_path, GPU, "separate")
    trainer, explorer = plan_jobs(loaded.config, ["both"], RUN, CODE)
    # Trinity's rule: the explorers take 4 engines x 2 GPUs of the 2 x 8, the trainer gets the other node.
    assert trainer.callables[0].nproc_per_node == 8
    assert [c.rank for c in explorer.callables] == [0, 1, 2, 3]
    assert "--gpus-per-node=2" in explorer.render()


JUDGE = {"name": "judge", "model_path": "/srv/models/judge", "engine_num": 2, "tensor_parallel_size": 2}


@pytest.mark.parametrize(("variant", "data"), [("cpu", BASE), ("gpu", GPU)])
def test_server_scripts(tmp_path: Path, variant: str, data: dict[str, Any]) -> None:
    """A shared auxiliary model (an LLM judge) gets a server array of its own, one task per engine, queued with
    the explorers in either layout; its GPUs per task are its tensor_parallel_size."""
    judged = {**data, "cluster": {"node_num": 3, "gpu_per_node": 8} if variant == "gpu" else data["cluster"],
              "explorer": {**data["explorer"], "auxiliary_models": [JUDGE]},
              "slurm": {**data["slurm"], "server": {"partition": "debug" if variant == "cpu" else "gpu",
                                                    "time": "12:00:00", "cpus_per_task": 4, "mem": "16G"}}}
    for layout, kinds in (("separate", ["trainer", "server", "explorer"]), ("hetjob", ["server", "hetjob"])):
        _, loaded = _config(tmp_path, judged, layout)
        plans = plan_jobs(loaded.config, [s.config.mode for s in loaded.stages], RUN, CODE)
        assert [p.kind for p in plans] == kinds
        server = plans[kinds.index("server")]
        assert (server.server, server.array_size, server.script_name) == ("judge", 2, "server-judge.sbatch")
        assert [(c.kind, c.rank, c.server, c.explorer) for c in server.callables] == \
            [("server", 0, "judge", "explorer"), ("server", 1, "judge", "explorer")]
        assert server.callables[1].command({}) == ["/opt/venv/bin/python", "-m", "rfthpc", "serve", "--run-dir",
                                                   str(RUN.root), "--model", "judge", "--engine", "1",
                                                   "--explorer", "explorer"]
        _check(f"{variant}-server-judge.sbatch", server.render())
        if variant == "gpu" and layout == "separate":
            # Explorers do not count the shared judge's GPUs: theirs are the rollout model's.
            assert "--gpus-per-node=2" in plans[-1].render() and "--gpus-per-node=2" in server.render()
