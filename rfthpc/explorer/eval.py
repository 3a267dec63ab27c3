"""Evaluation of the eval tasksets (`EvalSchedule`): metrics for the explorer's monitor, never training data.

Rank 0 of an explorer array evaluates every task of every eval taskset with the policy it holds,
on start-up (`explorer.eval_on_startup`), whenever the version crosses a multiple of
`explorer.eval_interval`, and on the final policy once the trainer is done. While it explores, an
evaluation due goes into the engine with the next training batch (one generate call for both),
so it does not hold the training rollouts back. For each taskset:

    eval/<taskset>/reward_mean        mean reward over all responses (an episode trained step-wise: once)
    eval/<taskset>/<component>        mean of each reward component (math: `accuracy`)
    eval/<taskset>/response_length    mean response tokens
    eval/<taskset>/tasks, failed      tasks evaluated, tasks whose workflow failed
    eval/<taskset>/success_rate, turns_mean, ...   multi-turn episodes (`rfthpc.explorer.episodes`)
    eval/<taskset>/judge_success, gold_reward      judged responses (`rfthpc.explorer.judged`)
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from rfthpc.config.settings import ExplorerStageSettings
from rfthpc.explorer.episodes import episode_metrics, stands_for_episode
from rfthpc.explorer.judged import judge_metrics
from rfthpc.explorer.rollout import TaskOutcome
from rfthpc.explorer.setup import Taskset
from rfthpc.explorer.stage_end import StageEnd, Stopped
from rfthpc.observe.monitor import Monitor
from rfthpc.rundir.explorer_meta import Progress
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import read_trainer_meta, trainer_done
from rfthpc.sharedfs.handoff import Doorbell, Waiter
from rfthpc.signals import StopRequest
from rfthpc.tasks.tasksets import Task
from rfthpc.weights.follow import WeightFollower

log = logging.getLogger(__name__)


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
            lengths.append(len(e.response_token_ids))
            if "turns" in e.info and not stands_for_episode(e.info):
                continue  # a later step of an episode: its reward is the episode's, counted once
            rewards.append(e.reward)
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



class EvalSchedule:
    """When rank 0 evaluates the policy it holds, and the evaluation of the final policy.

    An evaluation due while the explorer explores rides along with its next batch (the explorer asks
    `due`, adds `eval_tasks` to the batch and hands the outcomes to `log`); one due while no batch is
    explored, or the final one, runs alone (`evaluate`).
    """

    def __init__(self, run: RunDir, rank: int, follower: WeightFollower, progress: Progress, monitor: Monitor,
                 stop: StopRequest, flush: Callable[[], None], run_tasks: Callable[[list[Task]], list[TaskOutcome]],
                 follow: Callable[[], bool], tick: Callable[[], None], waiter: Waiter,
                 bells: Callable[[], list[Doorbell]]) -> None:
        """`flush`: commit what the explorer holds; `run_tasks`: run tasks in the explorer's engines;
        `follow`: load newer weights (True if it did); `tick`: the explorer's periodic duty while it
        waits; `waiter` and `bells`: how the final evaluation waits for a new policy or the trainer's end."""
        self.run = run
        self.rank = rank
        self.follower = follower
        self.progress = progress
        self.monitor = monitor
        self.stop = stop
        self.flush = flush
        self.run_tasks = run_tasks
        self.follow = follow
        self.tick = tick
        self.waiter = waiter
        self.bells = bells

    def evaluates(self, evals: Sequence[Taskset]) -> bool:
        """Rank 0 of an array with eval tasksets evaluates."""
        return self.rank == 0 and bool(evals)

    def started(self, stage: ExplorerStageSettings, evals: Sequence[Taskset]) -> None:
        """On start-up without `eval_on_startup`, the version held counts as evaluated."""
        if self.evaluates(evals) and self.progress.record.evaluated_version is None and not stage.eval_on_startup:
            self.progress.update(evaluated_version=self.follower.version)

    def startup_due(self, evals: Sequence[Taskset]) -> bool:
        """The start-up evaluation (`eval_on_startup`) is still due: no version evaluated yet."""
        return self.evaluates(evals) and self.progress.record.evaluated_version is None

    def due(self, stage: ExplorerStageSettings, evals: Sequence[Taskset]) -> bool:
        """An evaluation of the version held is due (never evaluated, or an eval_interval crossed)."""
        if not self.evaluates(evals):
            return False
        last = self.progress.record.evaluated_version
        return last is None or eval_due(self.follower.version, last, stage.eval_interval)

    def evaluate(self, evals: Sequence[Taskset]) -> None:
        """Evaluate the version held on its own (the final policy, or while no batch is explored)."""
        self.flush()
        began = time.perf_counter()
        outcomes = self.run_tasks(eval_tasks(evals))
        self.log(evals, outcomes, time.perf_counter() - began)

    def log(self, evals: Sequence[Taskset], outcomes: Sequence[TaskOutcome], seconds: float) -> None:
        """Log an evaluation of the version held; raises Stopped if a stop request cut it short."""
        metrics, complete = outcome_metrics(evals, outcomes)
        if not complete:
            raise Stopped()
        version = self.follower.version
        metrics["eval/version"] = version
        metrics["eval/time_s"] = seconds
        self.monitor.log(metrics, step=version, axis="eval/version")
        self.progress.update(evaluated_version=version)

    def final(self, stage: ExplorerStageSettings, evals: Sequence[Taskset]) -> StageEnd | None:
        """Rank 0: keep evaluating new versions until the trainer is done, then the final policy."""
        if self.rank != 0 or not evals:
            return None
        deadline = time.monotonic() + stage.sync_timeout
        skip = object()

        def trainer_gone() -> tuple[object] | None:
            """(None,) once the trainer is done (or has no report), (skip,) if no new policy came for
            sync_timeout; meanwhile each new version that is due is evaluated."""
            nonlocal deadline
            if read_trainer_meta(self.run) is None or trainer_done(self.run):
                return (None,)
            if self.follow():
                deadline = time.monotonic() + stage.sync_timeout
                if self.due(stage, evals):
                    self.evaluate(evals)
            if time.monotonic() >= deadline:
                log.warning("no new policy for %.0f s and the trainer is not done; skipping the final evaluation",
                            stage.sync_timeout)
                return (skip,)
            self.tick()
            return None

        try:
            # Woken by a publication or a report of the trainer (its end), or every weights_poll_interval.
            found = self.waiter.wait(trainer_gone, self.bells(), None, stop=lambda: self.stop.requested)
            if found is None:
                return StageEnd.STOPPED
            if found[0] is skip:
                return None
            self.follower.update()
            if self.progress.record.evaluated_version != self.follower.version:
                self.evaluate(evals)
        except Stopped:
            return StageEnd.STOPPED
        return None
