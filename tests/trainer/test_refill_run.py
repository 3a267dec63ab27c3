"""A real run (`rfthpc run`: trainer and two explorers as processes, tiny model, transformers engine)
in which the trainer drops stale groups, still reaches total_steps, and trains on distinct groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rfthpc.rundir.metrics import read_metrics
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import read_json
from rfthpc.tasks.claims import TaskClaims
from rfthpc.trainer.checkpoint import latest_checkpoint
from rfthpc.trainer.checkpoint_meta import read_checkpoint_meta
from tests.records import trainer_report
from tests.trainer.conftest import ROOT

pytestmark = pytest.mark.slow

WORKFLOW = Path(__file__).with_name("straggler_workflow.py")
STEPS, BATCH = 3, 4


def _config(tmp_path: Path, model: Path) -> Path:
    run = tmp_path / "ckpt" / "t" / "refill"
    questions = [{"question": f"What is {i} plus {i}?", "answer": f"#### {2 * i}"} for i in range(16)]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(q) + "\n" for q in questions))
    cfg = {
        "project": "t", "name": "refill", "checkpoint_root_dir": str(tmp_path / "ckpt"), "mode": "both",
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "model": {"model_path": str(model), "max_prompt_tokens": 96, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "batch_size": BATCH, "total_steps": STEPS,
            "explorer_input": {"tasksets": [{
                "name": "arith", "path": str(data), "format": {"prompt_key": "question", "response_key": "answer"},
                # Task 0 holds its explorer until the trainer has done 2 steps: its group (and its batch
                # mate's) then has staleness 2 > max_staleness 1 and is dropped.
                "default_workflow_type": f"{WORKFLOW}:straggler",
                "workflow_args": {"run_dir": str(run), "until_step": 2},
            }]},
            "trainer_input": {"experience_buffer": {"groups_per_chunk": 1, "max_read_timeout": 300.0}},
        },
        "explorer": {"runner_per_model": 4, "eval_on_startup": False,
                     "rollout_model": {"engine_type": "transformers", "engine_num": 2}},
        "synchronizer": {"sync_interval": 1, "sync_offset": 1, "sync_timeout": 300},
        "trainer": {"save_interval": 0, "save_hf_checkpoint": "never", "max_token_len_per_gpu": 256},
        "filesystem": {"poll_interval_s": 0.2},
        "monitor": {"monitor_type": []},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_dropped_groups_are_replaced_and_the_run_reaches_total_steps(tmp_path: Path, tiny_model: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, "-m", "rfthpc", "run", "--config", str(_config(tmp_path, tiny_model)),
                           "--explorers", "2"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          check=False)
    run = RunDir(tmp_path / "ckpt" / "t" / "refill")
    logs = {p.name: p.read_text() for p in run.log.glob("*.log")} if run.log.is_dir() else {}
    assert proc.returncode == 0, f"{proc.stderr[-3000:]}\n{logs}"

    meta = trainer_report(run)
    assert meta["done"] and meta["step"] == STEPS
    reader = read_checkpoint_meta(run.root, latest_checkpoint(run.root)).reader
    # Both groups of the straggler's claim (tasks 0 and 1) were dropped, and the explorers explored
    # two fresh tasks in their place, so all steps had a full batch.
    assert reader.counters["dropped_stale"] == 2 and reader.lost == {"arith": 2}
    assert reader.counters["consumed"] == STEPS * BATCH
    status = TaskClaims.read_status(run.root, "arith")
    assert status is not None and status.refill == 2 and status.issued == STEPS * BATCH + 2
    assert status.completed == status.issued and status.finished and not status.exhausted
    records = read_metrics(run.monitor / "trainer.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert records[-1]["store/dropped_stale"] == 2.0

    # Every committed group was consumed or dropped once (GC has deleted the chunks since): the
    # explorers committed 14, one per task, and explored the replacements for the last step, not
    # beyond it (serials 12 and 13 took positions 10 and 11, as the two lost groups left them free).
    committed = sum(read_json(p)["groups_committed"] for p in run.explorer_meta_root.rglob("*.json"))
    assert committed == STEPS * BATCH + 2 == status.completed and status.failed == 0
    batches = [r for p in run.monitor.glob("explorer_*.jsonl") for r in read_metrics(p) if "rollout/groups" in r]
    assert sum(r["rollout/groups"] for r in batches) == committed
    assert max(r["rollout/expected_step"] for r in batches) == STEPS
    assert "more fresh task(s) to replace groups the trainer dropped" in "".join(logs.values())
