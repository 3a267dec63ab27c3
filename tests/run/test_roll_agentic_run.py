"""ROLL's agentic example runs after import, not only validates: its FrozenLake config as ROLL's GiGPO page sets it
up (StepEnvManager, `adv_estimator: gigpo`) imports, and with only its sizes shrunk to a tiny model on CPU
(model, GPUs, engine, batch and episode lengths: the algorithm, the environment and the normalisation stay
ROLL's), `rfthpc run` trains each step of the episodes with GiGPO."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rfthpc.dialects.roll_import import import_roll
from rfthpc.rundir.paths import RunDir
from tests.run.conftest import env_for, finish, monitor_records, rfthpc

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parents[1] / "config" / "roll_examples" / "qwen2.5-0.5B-agentic" / \
    "agent_val_frozen_lake_async.yaml"
STEP_MANAGER = "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager"


@pytest.mark.parametrize("estimator", ["gigpo", "step_reinforce"])
def test_rolls_frozen_lake_example_trains_step_wise_after_import(tmp_path: Path, demo_dir: Path,
                                                                estimator: str) -> None:
    steps = 3
    imported = import_roll(EXAMPLE, tmp_path / "tasks", overrides=[
        f"adv_estimator={estimator}", f"env_manager_cls={STEP_MANAGER}", "max_actions_per_traj=3",
        "max_tokens_per_step=8"])
    for path, rows in imported.tasksets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[:64]))
    cfg = imported.config
    args = cfg["algorithm"]["advantage_fn_args"]
    assert cfg["algorithm"]["advantage_fn"] == {"gigpo": "roll_gigpo"}.get(estimator, estimator)
    assert args["norm_std_type"] == "group"
    # Sizes only: a tiny model on CPU, short episodes, a few small steps.
    cfg.update(project="roll-import", name=f"roll-{estimator}", checkpoint_root_dir=str(tmp_path / "ckpt"),
               monitor={"monitor_type": []}, filesystem={"poll_interval_s": 0.2})
    cfg.pop("slurm", None)
    cfg["model"].update(model_path=str(demo_dir / "model"), dtype="float32", max_model_len=1024,
                        max_prompt_tokens=768, max_response_tokens=8)
    cfg["cluster"] = {"node_num": 1, "gpu_per_node": 0}
    cfg["algorithm"]["repeat_times"] = 4
    cfg["algorithm"]["optimizer"]["lr_warmup_steps"] = 0
    cfg["buffer"].update(total_steps=steps, batch_size=2)
    cfg["buffer"]["explorer_input"]["eval_tasksets"] = []
    (train,) = cfg["buffer"]["explorer_input"]["tasksets"]
    assert train["workflow_args"]["step_wise"] is True and train["workflow_args"]["env"] == "frozen_lake"
    train["workflow_args"]["max_context_tokens"] = 768
    cfg["explorer"] = {"rollout_model": {"engine_type": "transformers", "engine_num": 1, "dtype": "float32"},
                       "runner_per_model": 2, "eval_on_startup": False}
    cfg["trainer"].update(ppo_mini_batch_size=2, enable_gradient_checkpointing=False)
    config = tmp_path / "imported.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env_for(demo_dir, tmp_path / "ckpt")), 600)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    run = RunDir(tmp_path / "ckpt" / cfg["project"] / cfg["name"])
    records = monitor_records(run.root)
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert all(r["response_length/mean"] > 0 for r in records)
    explorer = monitor_records(run.root, "explorer_explorer_0")
    assert any(r.get("rollout/turns_mean", 0) > 1 for r in explorer)
