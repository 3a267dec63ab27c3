"""Episode metrics of the explorer's rollouts and evaluations (turns, success, truncation, invalid actions)."""

from __future__ import annotations

import pytest

from rfthpc.explorer.episodes import episode_metrics
from rfthpc.explorer.eval import eval_metrics
from rfthpc.explorer.rollout import TaskOutcome
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import Experience, WorkflowResult


def _info(turns: int, invalid: int, truncated: bool, success: bool | None) -> dict:
    info = {"turns": turns, "invalid_actions": invalid, "truncated": truncated}
    return info if success is None else {**info, "success": success}


INFOS = [_info(2, 0, False, True), _info(4, 1, True, False), _info(6, 3, True, None), {"unrelated": 1}]


def test_episode_metrics_average_over_episodes_and_turns() -> None:
    assert episode_metrics("rollout", INFOS) == {
        "rollout/turns_mean": 4.0,
        "rollout/truncation_rate": pytest.approx(2 / 3),
        "rollout/invalid_action_rate": pytest.approx(4 / 12),
        "rollout/success_rate": 0.5,  # of the episodes whose environment said
    }


def test_single_turn_experiences_give_no_episode_metrics() -> None:
    assert episode_metrics("rollout", [{}, {"reward_error": "x"}]) == {}


def test_eval_tasksets_report_success_rate_and_mean_turns() -> None:
    task = Task(task_id="t/0", taskset="t", index=0, raw={}, prompt="", truth=None, workflow="env_workflow",
                reward_fn=None)
    exps = [Experience([1], [2], [0.0], [1], reward=float(i.get("success") or 0), info=i) for i in INFOS[:3]]
    metrics = eval_metrics("walk", [TaskOutcome(task, WorkflowResult(exps)), TaskOutcome(task, error="boom")])
    assert metrics["eval/walk/success_rate"] == 0.5 and metrics["eval/walk/turns_mean"] == 4.0
    assert metrics["eval/walk/failed"] == 1.0 and metrics["eval/walk/reward_mean"] == pytest.approx(1 / 3)


def test_an_episode_trained_step_wise_counts_once(tokenizer) -> None:
    """env_workflow with step_wise: every step carries its episode's facts and reward; the rollout and eval
    figures count the episode once (not once per step, which would weigh long episodes more)."""
    from rfthpc.workflows.registry import run_workflow
    from tests.workflows.conftest import ScriptedEngine, context, env_task

    # One episode walks right to the goal in a few moves; the other walks left until the environment gives up.
    runs = {}
    for step_wise in (False, True):
        task = env_task(index=3, env_args={"max_steps": 6}, reward_type="success", step_wise=step_wise)
        runs[step_wise] = [TaskOutcome(task, run_workflow(task, context(ScriptedEngine(tokenizer, lambda _: move),
                                                                         tokenizer)))
                           for move in ("right", "left")]
    whole, steps = runs[False], runs[True]
    assert sum(len(o.result.experiences) for o in steps) > 2 * len(whole)
    figures = eval_metrics("w", whole)
    assert figures["eval/w/success_rate"] == figures["eval/w/success"] == 0.5
    assert eval_metrics("w", steps) == {**figures, "eval/w/response_length": eval_metrics("w", steps)[
        "eval/w/response_length"]}
    assert episode_metrics("rollout", [e.info for o in steps for e in o.result.experiences]) == episode_metrics(
        "rollout", [e.info for o in whole for e in o.result.experiences])
