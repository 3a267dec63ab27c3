"""An environment taskset on the local Slurm cluster: `env_workflow` episodes of FrozenLake explored
by a 2-task explorer array, trained by GRPO, every group taken once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rfthpc.rundir.metrics import read_metrics
from tests.launch.conftest import tiny_config, wait_terminal, write_yaml
from tests.launch.runcheck import check_exactly_once, consumption, log_tails
from tests.launch.test_e2e import job_ids, runs, submit, wait_done  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(900)]


def _frozen_lake_taskset(path: Path, n: int) -> Path:
    """n tasks, each a 3x3 FrozenLake map by seed (the prompt column names the task; the workflow
    plays the environment). Episodes of two steps: the environment ends each and says whether it
    succeeded."""
    path.mkdir(parents=True)
    rows = [{"prompt": f"frozen lake {seed}", "env_args": {"seed": seed}} for seed in range(n)]
    (path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_submit_explores_an_environment_taskset(slurm_cluster: None, demo_data: Path, runs: Path,  # noqa: F811
                                                tmp_path: Path) -> None:
    steps, batch = 3, 4
    data = _frozen_lake_taskset(tmp_path / "lake", 40)
    cfg = tiny_config(demo_data, runs, "lake", buffer={
        "total_steps": steps, "batch_size": batch,
        "explorer_input": {
            "taskset": {"name": "lake", "path": str(data), "split": "train", "format": {"prompt_key": "prompt", "response_key": ""},
                        "workflow_args": {"env": "frozen_lake", "env_args": {"size": 3, "max_steps": 2},
                                          "max_turns": 3, "max_tokens_per_turn": 8}},
            "default_workflow_type": "env_workflow",
        },
    }, model={"max_prompt_tokens": 160, "max_response_tokens": 400})
    run = submit(write_yaml(tmp_path / "run.yaml", cfg))
    trainer_id, _ = job_ids(run)
    assert wait_done(run, trainer_id)["step"] == steps
    assert wait_terminal(trainer_id, 120) == {trainer_id: "COMPLETED"}, log_tails(run)
    check_exactly_once(consumption(run), expected_consumed=steps * batch)
    rollouts = [r for p in sorted((run / "monitor").glob("explorer*.jsonl")) for r in read_metrics(p)]
    assert rollouts and all("rollout/turns_mean" in r and "rollout/success_rate" in r
                            for r in rollouts if "rollout/groups" in r)
