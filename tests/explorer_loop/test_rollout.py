"""Running a batch of workflows (real transformers engine, real batcher): retries, time limits, config
mistakes, a failed engine and stop requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.engines import EngineSettings, make_engine
from rfthpc.engines.batching import EngineFailed, RequestBatcher
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import ConfigError
from rfthpc.explorer.rollout import RolloutPolicy, run_tasks
from rfthpc.signals import StopRequest
from rfthpc.tasks.tasksets import PromptBuilder, Task
from rfthpc.workflows.base import WorkflowContext
from tests.engines.helpers import DyingEngine
from tests.explorer_loop import user_workflows

WORKFLOWS = Path(user_workflows.__file__)


@pytest.fixture(scope="module")
def rollout(tiny_model: Path):
    """A runner for task batches: `rollout(tasks, policy, stop)` -> outcomes."""
    from transformers import AutoTokenizer

    engine = make_engine("transformers", EngineSettings(str(tiny_model), seed=0))
    batcher = RequestBatcher({"policy": engine})
    ctx = WorkflowContext(batcher.client("policy"), PromptBuilder(AutoTokenizer.from_pretrained(str(tiny_model))))
    yield lambda tasks, policy, stop: run_tasks(tasks, ctx, batcher, policy, stop)
    engine.close()


@pytest.fixture
def dying_rollout(tiny_model: Path):
    """Like `rollout`, with an engine that fails (EngineDeadError) from its first call on."""
    from transformers import AutoTokenizer

    engine = DyingEngine(EngineSettings(str(tiny_model), seed=0), requests=0)
    batcher = RequestBatcher({"policy": engine})
    ctx = WorkflowContext(batcher.client("policy"), PromptBuilder(AutoTokenizer.from_pretrained(str(tiny_model))))
    yield lambda tasks, policy, stop: run_tasks(tasks, ctx, batcher, policy, stop)
    engine.close()


def tasks(workflow: str, n: int = 3) -> list[Task]:
    return [Task(task_id=f"t/{workflow}/{i}", taskset="t", index=i, raw={}, prompt=f"What is {i} plus {i}?",
                 truth=str(2 * i), workflow=f"{WORKFLOWS}:{workflow}", reward_fn=None,
                 rollout_args=SamplingArgs(max_tokens=4), repeat_times=2) for i in range(n)]


def test_failed_attempts_are_retried(rollout) -> None:
    outcomes = rollout(tasks("flaky"), RolloutPolicy(retries=1, retry_interval_s=0.0), StopRequest())
    assert [o.attempts for o in outcomes] == [2, 2, 2]
    assert all(o.error is None and len(o.result.experiences) == 2 for o in outcomes)


def test_a_workflow_past_max_timeout_is_given_up(rollout) -> None:
    policy = RolloutPolicy(max_timeout_s=0.5, retries=1, retry_interval_s=0.0)
    outcomes = rollout(tasks("slow", 2), policy, StopRequest())
    assert all(o.result is None and o.attempts == 2 and "explorer.max_timeout" in o.error for o in outcomes)
    # The batcher serves the next workflows normally.
    assert rollout(tasks("plain", 1), policy, StopRequest())[0].error is None


def test_config_mistake_in_a_workflow_stops_the_batch(rollout) -> None:
    with pytest.raises(ConfigError, match="unknown tool"):
        rollout(tasks("misconfigured"), RolloutPolicy(), StopRequest())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workflow", ["plain", "forgiving"])
def test_a_failed_engine_stops_the_batch_without_retries(dying_rollout, workflow: str) -> None:
    """Also when the workflow catches the engine's error itself and returns a group. (A retry would
    wait longer than the test's time limit.)"""
    policy = RolloutPolicy(concurrency=2, retries=1, retry_interval_s=120.0)
    with pytest.raises(EngineFailed, match=r"engine 'policy' failed: EngineDeadError"):
        dying_rollout(tasks(workflow, 4), policy, StopRequest())


def test_stop_request_cancels_every_task(rollout) -> None:
    stop = StopRequest()
    stop.request("SIGTERM")
    outcomes = rollout(tasks("plain", 4), RolloutPolicy(concurrency=2), stop)
    assert all(o.cancelled and o.result is None for o in outcomes)
