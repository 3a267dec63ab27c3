"""Run the workflows of a batch of tasks concurrently, their generate calls batched into one engine call.

`runner_per_model` daemon threads each take the next task and run its workflow; the calling (main)
thread serves their engine calls through the `RequestBatcher` and, between batches, calls `tick`
(heartbeats, leases) and watches for a stop request or a workflow that ran past `max_timeout_s`.

A workflow that raises is retried (`retries` times, `retry_interval_s` apart) and then given up; a
config mistake (`UserError`, e.g. a reward function with unknown arguments) and a failed engine
(`EngineFailed`, e.g. vLLM's EngineDeadError) stop the batch: `run_tasks` raises them, as no retry
and no other task can succeed. On a stop request no new generate call is served: workflows end
with `cancelled` outcomes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rfthpc.engines.batching import EngineFailed, GenerationCancelled, RequestBatcher
from rfthpc.errors import UserError
from rfthpc.explorer.teacher import score_with_teacher
from rfthpc.rewards.registry import REWARDS
from rfthpc.signals import StopRequest
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import RolloutEngine, WorkflowContext, WorkflowResult
from rfthpc.workflows.registry import WORKFLOWS, run_workflow

log = logging.getLogger(__name__)

SERVE_POLL_S = 0.2


@dataclass
class TaskOutcome:
    """What became of one task."""

    task: Task
    result: WorkflowResult | None = None
    """The workflow's group (None if it failed or was cancelled)."""
    error: str | None = None
    """Why the task was given up, after every attempt failed."""
    cancelled: bool = False
    """Not finished because the explorer is stopping: release the task for another explorer."""
    attempts: int = 0
    started: float = 0.0
    finished: float = 0.0


@dataclass(frozen=True)
class RolloutPolicy:
    """Concurrency, time and retry limits of workflow runs."""

    concurrency: int = 8
    """Workflows in flight at once (`explorer.runner_per_model`)."""
    max_timeout_s: float = 1800.0
    """A workflow run taking longer gets its generate calls cancelled, and the task is retried."""
    retries: int = 2
    """Further attempts after a failed run (`explorer.max_retry_times`)."""
    retry_interval_s: float = 1.0
    """Pause before a retry (`explorer.max_retry_interval`)."""


class _Runners:
    def __init__(self, tasks: Sequence[Task], ctx: WorkflowContext, batcher: RequestBatcher,
                 policy: RolloutPolicy, stop: StopRequest, workers: int, teacher: RolloutEngine | None) -> None:
        self.ctx = ctx
        self.teacher = teacher
        self.batcher = batcher
        self.policy = policy
        self.stop = stop
        self.queue = deque(enumerate(tasks))
        self.outcomes: list[TaskOutcome] = [TaskOutcome(t, cancelled=True) for t in tasks]
        self.lock = threading.Lock()
        self.running: dict[int, float] = {}
        """Start time of the attempt each runner thread is in."""
        self.timed_out: set[int] = set()
        self.fatal: BaseException | None = None
        self.workers = workers
        """Runner threads that have not returned yet."""

    def finished(self) -> bool:
        """True once every runner thread has returned."""
        with self.lock:
            return self.workers == 0

    def worker(self) -> None:
        try:
            while True:
                with self.lock:
                    if not self.queue or self.stop.requested or self.fatal is not None:
                        return
                    i, task = self.queue.popleft()
                self.outcomes[i] = self.run_one(task)
        finally:
            with self.lock:
                self.workers -= 1
            # The serving thread may be waiting for calls that will not come: the batch is over.
            self.batcher.wake()

    def run_one(self, task: Task) -> TaskOutcome:
        outcome = TaskOutcome(task, started=time.time())
        while True:
            outcome.attempts += 1
            with self.batcher.runner() as ident:
                with self.lock:
                    self.running[ident] = time.monotonic()
                    self.timed_out.discard(ident)
                try:
                    outcome.result = run_workflow(task, self.ctx)
                    if self.teacher is not None and not task.is_eval:
                        score_with_teacher(self.teacher, outcome.result.experiences)
                    error = None
                except GenerationCancelled as e:
                    timed_out = ident in self.timed_out
                    if not timed_out:
                        outcome.cancelled = True
                        break
                    error = f"timed out after {self.policy.max_timeout_s:.0f} s (explorer.max_timeout): {e}"
                except (UserError, EngineFailed) as e:
                    # A config mistake fails every task alike, a failed engine every call: stop instead of retrying.
                    self.stop_batch(e)
                    outcome.cancelled = True
                    break
                except Exception as e:
                    error = f"{type(e).__name__}: {e}"
                    log.warning("task %s: workflow %s failed (attempt %d): %s", task.task_id, task.workflow,
                                outcome.attempts, error, exc_info=True)
                finally:
                    with self.lock:
                        self.running.pop(ident, None)
            if self.batcher.failure is not None:
                # Also when the workflow (or its reward function) caught the engine's error and went on:
                # its result may rest on a failed call, so the task goes back to the pool.
                self.stop_batch(self.batcher.failure)
                outcome.result, outcome.cancelled = None, True
                break
            if error is None:
                break
            if self.stop.requested:
                outcome.cancelled = True
                break
            if outcome.attempts > self.policy.retries:
                outcome.error = error
                log.error("task %s given up after %d attempts: %s", task.task_id, outcome.attempts, error)
                break
            time.sleep(self.policy.retry_interval_s)
        outcome.finished = time.time()
        return outcome

    def stop_batch(self, error: BaseException) -> None:
        """Record the first error that stops the whole batch (no new task starts; `run_tasks` raises it)."""
        with self.lock:
            if self.fatal is None:
                self.fatal = error

    def expire(self) -> None:
        now = time.monotonic()
        with self.lock:
            late = [i for i, start in self.running.items()
                    if now - start > self.policy.max_timeout_s and i not in self.timed_out]
            self.timed_out.update(late)
        for ident in late:
            self.batcher.cancel("workflow run exceeded explorer.max_timeout", runner=ident)


def resolve_functions(tasks: Sequence[Task]) -> None:
    """Look up every workflow and reward function the tasks name, in the calling thread.

    Unknown names fail here (ConfigError) instead of in every runner; and the registries load their
    built-ins lazily, which is not safe to do from several runner threads at once.
    """
    for name in {t.workflow for t in tasks}:
        WORKFLOWS.get(name)
    for name in {t.reward_fn for t in tasks if t.reward_fn}:
        REWARDS.get(name)
    REWARDS.names()


def run_tasks(
    tasks: Sequence[Task],
    ctx: WorkflowContext,
    batcher: RequestBatcher,
    policy: RolloutPolicy,
    stop: StopRequest,
    tick: Callable[[], None] = lambda: None,
    teacher: RolloutEngine | None = None,
) -> list[TaskOutcome]:
    """Run each task's workflow; return one outcome per task, in task order. With `teacher` (on-policy
    distillation's, `rfthpc.explorer.teacher`) each training task's experiences are scored by it as part
    of the task: a failed scoring fails the attempt as a failed workflow does.

    Must be called from the thread that may use the engines (it serves their calls).
    """
    if not tasks:
        return []
    resolve_functions(tasks)
    n_threads = min(policy.concurrency, len(tasks))
    runners = _Runners(tasks, ctx, batcher, policy, stop, n_threads, teacher)
    threads = [threading.Thread(target=runners.worker, name=f"rfthpc-runner-{k}", daemon=True)
               for k in range(n_threads)]
    for t in threads:
        t.start()
    cancelled = False
    while not runners.finished():
        batcher.serve(SERVE_POLL_S, until=runners.finished)
        tick()
        runners.expire()
        if not cancelled and (stop.requested or runners.fatal is not None):
            batcher.cancel(stop.reason or f"the batch stopped: {runners.fatal}")
            cancelled = True
    for t in threads:
        t.join()
    if cancelled:
        batcher.resume()
    if runners.fatal is not None:
        raise runners.fatal
    return runners.outcomes
