"""Evaluation of the eval tasksets: metrics for the explorer's monitor, never training data.

Rank 0 of an explorer array evaluates every task of every eval taskset with the policy it holds,
on start-up (`explorer.eval_on_startup`), whenever the version crosses a multiple of
`explorer.eval_interval`, and on the final policy once the trainer is done. While it explores, an
evaluation due goes into the engine with the next training batch (one generate call for both),
so it does not hold the training rollouts back. For each taskset:

    eval/<taskset>/reward_mean        mean reward over all responses
    eval/<taskset>/<component>        mean of each reward component (math: `accuracy`)
    eval/<taskset>/response_length    mean response tokens
    eval/<taskset>/tasks, failed      tasks evaluated, tasks whose workflow failed
    eval/<taskset>/success_rate, turns_mean, ...   multi-turn episodes (`rfthpc.explorer.episodes`)
    eval/<taskset>/judge_success, gold_reward      judged responses (`rfthpc.explorer.judged`)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from rfthpc.explorer.episodes import episode_metrics
from rfthpc.explorer.judged import judge_metrics
from rfthpc.explorer.rollout import TaskOutcome
from rfthpc.explorer.setup import Taskset


def eval_due(version: int, last_evaluated: int | None, interval: int) -> bool:
    """True if `version` crosses a multiple of `interval` past the last evaluated version."""
    if last_evaluated is None:
        return False
    if interval <= 0 or version <= last_evaluated:
        return False
    return version // interval > last_evaluated // interval


def eval_metrics(name: str, outcomes: Sequence[TaskOutcome]) -> dict[str, float]:
    """Metrics of one eval taskset from its outcomes (see the module doc)."""
    rewards: list[float] = []
    lengths: list[int] = []
    components: dict[str, list[float]] = defaultdict(list)
    failed = 0
    for o in outcomes:
        if o.result is None:
            failed += 1
            continue
        for e in o.result.experiences:
            rewards.append(e.reward)
            lengths.append(len(e.response_token_ids))
            for key, value in e.reward_components.items():
                components[key].append(value)
    prefix = f"eval/{name}"
    out = {f"{prefix}/tasks": float(len(outcomes)), f"{prefix}/failed": float(failed)}
    if rewards:
        out[f"{prefix}/reward_mean"] = float(np.mean(rewards))
        out[f"{prefix}/response_length"] = float(np.mean(lengths))
    for key, values in components.items():
        out[f"{prefix}/{key}"] = float(np.mean(values))
    infos = [e.info for o in outcomes if o.result is not None for e in o.result.experiences]
    out.update(episode_metrics(prefix, infos))
    out.update(judge_metrics(prefix, infos))
    return out


def eval_tasks(tasksets: Sequence[Taskset]) -> list:
    """Every task of every eval taskset, in order (one batch: they generate together)."""
    return [task for ts in tasksets for task in ts.tasks]


def outcome_metrics(tasksets: Sequence[Taskset], outcomes: Sequence[TaskOutcome]) -> tuple[dict[str, float], bool]:
    """Metrics of `outcomes`, the outcomes of `eval_tasks(tasksets)`; (metrics, complete).

    `complete` is False when the run was cancelled (a stop request): the metrics are then partial
    and should not be logged.
    """
    if any(o.cancelled for o in outcomes):
        return {}, False
    metrics: dict[str, float] = {}
    start = 0
    for ts in tasksets:
        metrics.update(eval_metrics(ts.name, outcomes[start:start + len(ts.tasks)]))
        start += len(ts.tasks)
    return metrics, True

