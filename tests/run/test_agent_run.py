"""`rfthpc run` with `agent_workflow`: the explorer serves the policy behind its OpenAI-compatible endpoint,
the user's agent (the `openai` client, in a process of its own per episode) plays each episode through it,
and `multi_step_grpo` trains every recorded call: the run ends with each group consumed once."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.rundir.endpoints import read_endpoints
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import read_trainer_meta
from tests.run.conftest import env_for, finish, monitor_records, rfthpc, rl_only, store_counts

pytestmark = pytest.mark.slow


def test_an_agent_behind_the_endpoint_trains_with_multi_step_grpo(demo_dir: Path, tmp_path: Path) -> None:
    steps = 3
    env = env_for(demo_dir, tmp_path / "ckpt")
    config = rl_only(tmp_path / "agent.yaml", "agent", steps=steps,
                     algorithm={"algorithm_type": "multi_step_grpo", "repeat_times": 4},
                     # Room for the second call's prompt: the task, the first reply and "again".
                     model={"max_prompt_tokens": 128, "max_response_tokens": 16},
                     buffer={"explorer_input": {"taskset": {
                         "default_workflow_type": "agent_workflow",
                         "workflow_args": {"agent": "tests.workflows.agents:chat_twice", "isolation": "process",
                                           "timeout_s": 240, "agent_args": {"calls": 2}}}}})
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env), 600)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    run = RunDir(tmp_path / "ckpt" / "rfthpc-demo" / "agent")
    meta = read_trainer_meta(run)
    assert meta.done and meta.step == steps
    # The explorer published where it served the policy, and withdrew it when it ended.
    assert run.endpoints.is_dir() and read_endpoints(run.root) == []
    counts = store_counts(run.root)
    assert counts["consumed"] == counts["committed"] == steps * 4, counts
    trainer = monitor_records(run.root)
    assert [r["step"] for r in trainer] == list(range(1, steps + 1))
    assert all(r["response_length/mean"] > 0 for r in trainer)
    rollouts = monitor_records(run.root, "explorer_explorer_0")
    batches = [r for r in rollouts if "rollout/groups" in r]
    # Every episode made its two calls, each an experience: 4 episodes x 2 calls per group.
    assert batches and all(r["rollout/failed_episodes"] == 0 for r in batches), batches
    assert all(r["rollout/tokens"] == round(r["rollout/response_length"] * 8 * r["rollout/groups"]) for r in batches)
