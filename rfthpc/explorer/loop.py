"""The explorer loop: claim tasks -> wait for an allowed policy -> generate and score -> commit groups.

One process (one Slurm array task, or one local process) runs it:

1. For each stage whose mode is `both` or `explore`, in order: wait until the trainer reports it
   has started the stage (the first stage needs no wait), then explore its tasksets one after
   another.
2. Each step claims this process's share of a batch (`ceil(buffer.batch_size / array size)` tasks)
   from the taskset's claims (`ClaimSet`), loads the newest complete published weights (`sync_style:
   fixed`; the other styles at their sync points after a batch, `rfthpc.explorer.sync`), waits
   (bounded by `synchronizer.sync_timeout`) while the policy held is older than the staleness bound
   allows for these tasks (`rfthpc.explorer.staleness`), then runs the tasks' workflows concurrently
   with their generate calls batched into one engine call (`rfthpc.explorer.rollout`).
3. Each finished group, stamped with the policy version that generated it, goes to the
   `ChunkWriter`; a claim is completed only once its group's chunk is committed, so a crash never
   loses a task (a requeued or other explorer redoes it). Tasks that failed every attempt or were
   skipped (over-long prompt), and groups dynamic sampling drops (`rfthpc.algorithms.shaping`: all
   responses scored alike), are completed without a group and counted. With a greedy baseline
   (ReMax) each task also runs once greedily, in the same engine calls, and the group carries its reward.
   Once every task of the stage is done, the process stays while the trainer is still in the
   stage: each group the trainer drops as stale, and each task that gave no group, is replaced by
   a fresh task (`TaskClaims` refill, within the tasksets' epochs), so the trainer reaches its
   `total_steps`.
   Auxiliary models placed `per_explorer` are engines of this process, batched the same way; a
   shared one is its server job's, reached over HTTP from the workflow's own thread
   (`rfthpc.engines.remote`).
4. Rank 0 evaluates the eval tasksets on start-up, every `explorer.eval_interval` versions and on
   the final policy (`rfthpc.explorer.eval`); metrics go to `monitor/explorer_<name>_<rank>.jsonl`.

Exit codes: 0 when every task is done or the trainer is done; `EXIT_PREEMPTED` (124) after a
SIGTERM/SIGUSR2 (finished groups committed, unfinished claims released); a `UserError` (exit 2)
when no allowed policy appears within `sync_timeout` or the input is bad; `EXIT_FAILED` (1) when
an engine failed (`EngineFailed`: committed groups stay, the batch's claims are released).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np

from rfthpc.config.settings import POLICY_ENGINE, ExplorerSettings, ExplorerStageSettings, InferenceModelSettings
from rfthpc.engines.base import EngineSettings, EngineType, PolicyEngine, is_greedy, make_engine
from rfthpc.engines.batching import EngineFailed, RequestBatcher
from rfthpc.engines.gpus import build_engines, process_gpus
from rfthpc.engines.remote import RemoteClient, RemoteEngine
from rfthpc.engines.time_sharing import GpuTurns, TimeShare, device_ids, turns_dir
from rfthpc.errors import EXIT_PREEMPTED, UserError
from rfthpc.explorer import setup
from rfthpc.explorer.episodes import episode_metrics
from rfthpc.explorer.eval import EvalSchedule, eval_tasks
from rfthpc.explorer.heartbeat import Heartbeat
from rfthpc.explorer.judged import judge_metrics
from rfthpc.explorer.rollout import RolloutPolicy, TaskOutcome, run_tasks
from rfthpc.explorer.stage_end import StageEnd, Stopped
from rfthpc.explorer.staleness import expected_train_step, required_version, servable, staleness, taskset_offsets
from rfthpc.explorer.sync import WeightSync
from rfthpc.observe.monitor import Monitor
from rfthpc.rundir.endpoints import publish_endpoint, withdraw_endpoint
from rfthpc.rundir.explorer_meta import Progress
from rfthpc.rundir.paths import RunDir, check_layout
from rfthpc.rundir.phases import PhaseLog
from rfthpc.rundir.trainer_meta import read_trainer_meta, trainer_doorbell
from rfthpc.sharedfs.fileops import set_share_group
from rfthpc.sharedfs.handoff import Waiter, WaitPolicy
from rfthpc.sharedfs.mounts import log_filesystem
from rfthpc.signals import StopRequest
from rfthpc.store import ChunkWriter, Group
from rfthpc.store.schema import BASELINE_REWARD, StoredExperience, TaskRef
from rfthpc.tasks.claims import Claim, ClaimSet
from rfthpc.tasks.tasksets import Task
from rfthpc.weights import node_local, published
from rfthpc.weights.follow import WeightFollower
from rfthpc.workflows.base import RolloutEngine, WorkflowContext

log = logging.getLogger(__name__)


EngineFactory = Callable[[EngineType, EngineSettings], PolicyEngine]

EXIT_FAILED = 1
"""Exit code of an explorer whose engine failed (as the trainer's): submitit and Slurm see a failed task."""


class GenerationBudgetExceeded(UserError):
    """Dynamic sampling dropped nearly every group for `filter_groups.max_num_gen_batches` batches."""


@dataclass
class _Source:
    """One training taskset of the stage being explored, with its claims."""

    taskset: setup.Taskset
    claims: ClaimSet
    offset: int


class _Unsettled:
    """The claims of one batch, as a context: on leaving, however it is left, the claims neither
    completed nor handed to the writer go back to the pool (the one release path of the loop)."""

    def __init__(self, claim_set: ClaimSet, claims: list[Claim]) -> None:
        self.claim_set = claim_set
        self.claims = claims
        self._open = {c.key: c for c in claims}

    def settle(self, claims: Sequence[Claim]) -> None:
        """These claims are completed, or their groups are with the writer (completed on commit)."""
        for c in claims:
            self._open.pop(c.key, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open:
            self.claim_set.release(list(self._open.values()))


@dataclass
class _Pending:
    """A group handed to the writer whose claim is completed once its chunk is committed."""

    claims: ClaimSet
    claim: Claim


def _greedy(task: Task) -> Task:
    """The task's greedy twin: one response at temperature 0, scored by the task's own reward function."""
    return dataclasses.replace(task, repeat_times=1, rollout_args=dataclasses.replace(task.rollout_args,
                                                                                      temperature=0.0))


def _rollout_policy(settings: ExplorerSettings) -> RolloutPolicy:
    return RolloutPolicy(concurrency=settings.runner_per_model, max_timeout_s=settings.max_timeout,
                         retries=settings.max_retry_times, retry_interval_s=settings.max_retry_interval)


class Explorer:
    """One explorer process: array task `rank` of explorer array `name` in run directory `run_dir`."""

    def __init__(
        self,
        run_dir: Path,
        name: str,
        rank: int,
        settings: ExplorerSettings,
        engine_factory: EngineFactory = make_engine,
        process_ends: bool = False,
        time_share_gpus: bool = False,
    ) -> None:
        """`settings`: the run's (`explorer_settings(load_resolved(config).stages)`); `process_ends`: the
        process ends when `run` returns (`rfthpc explore`), so engines release only what would outlive it;
        `time_share_gpus`: take turns on this process's GPUs with the trainer colocated with it, the engines
        asleep between turns (rfthpc.engines.time_sharing)."""
        if rank < 0:
            raise UserError(f"explorer rank {rank}: use an array task index >= 0")
        self.rundir = RunDir(run_dir)
        self.name = name
        self.rank = rank
        self.settings = settings
        self.stages = settings.stages
        self.owner = f"{name}/{rank}"
        self.stage_name = ""
        self.tasksets: dict[int, tuple[list[setup.Taskset], list[setup.Taskset]]] = {}
        self.engine_factory = engine_factory
        self.process_ends = process_ends
        self.stop = StopRequest()
        self.engines: dict[str, PolicyEngine] = {}
        self.writer: ChunkWriter | None = None
        self.monitor: Monitor | None = None
        self.pending: list[_Pending] = []
        self.claim_sets: list[ClaimSet] = []
        self._kept_since_share = 0
        """Groups kept (dynamic sampling) towards this explorer's share of the next trainer batch."""
        self._batches_since_share = 0
        """Batches explored since the last share was filled (`filter_groups.max_num_gen_batches`)."""
        self.follower = WeightFollower(self.rundir, name, rank, node_local.staging_root(settings.staging_dir),
                                       poll_s=settings.weights_poll_interval)
        self.time_share = TimeShare(
            GpuTurns(turns_dir(node_local.staging_root(settings.staging_dir), self.rundir.root), device_ids(),
                     f"explorer {name} rank {rank}"),
            lambda: self.stop.requested, cancelled=Stopped) if time_share_gpus else None
        self.phases: PhaseLog | None = None
        """Start-up and shutdown phases (rfthpc.rundir.phases), from `run`."""
        self.endpoint_file: Path | None = None
        self.teacher: RolloutEngine | None = None
        """On-policy distillation's teacher scoring each training sample (`explorer.teacher_model`)."""
        """Where this process published its policy endpoint (`rfthpc.rundir.endpoints`), once agents use it."""

    # ---- lifecycle -----------------------------------------------------------------------------

    def run(self) -> int:
        """Explore until done; return the exit code (0 done, 124 stopped by a signal, 1 an engine failed)."""
        explore = [s for s in self.stages if s.explores]
        if not explore:
            log.info("no stage has mode both or explore: nothing to explore")
            return 0
        settings = self.settings
        check_layout(self.rundir)
        set_share_group(settings.share_group)
        self.phases = PhaseLog(self.rundir.root, f"explorer_{self.name}_{self.rank}")
        self.phases.mark("imports")
        if self.rank == 0:
            log_filesystem(self.rundir.root, settings.lock_type, log)
        self.stop.install()
        self.progress = Progress(self.rundir, self.name, self.rank, settings.lease_s)
        self.waiter = Waiter(WaitPolicy(slow_s=settings.weights_poll_interval))
        self.sync = WeightSync(self.rundir, self.name, self.rank, self.follower, self.progress, self.stop, self._tick,
                               self.waiter)
        try:
            # Bad data fails here, before minutes are spent starting an engine.
            self.tasksets = {s.index: self._load_tasksets(s) for s in explore}
            with Heartbeat(settings.lease_s / 4, lambda: self.claim_sets, self.follower, self.progress):
                self._start()
                self.phases.mark("engine")
                return self._run_stages(explore)
        except EngineFailed as e:
            return self._failed(e)
        except Stopped:  # while waiting for its turn on the GPUs to start its engines
            return self._stopped()
        finally:
            self._shutdown()
            self.phases.mark("exit")

    def _start(self) -> None:
        settings = self.settings
        self.progress.update(state="starting")
        self.monitor = Monitor(self.rundir, f"explorer_{self.name}_{self.rank}", settings.monitor, settings.project,
                               settings.name,
                               primary=self.rank == 0)
        self.writer = ChunkWriter(self.rundir.root, self.name, self.rank, settings.groups_per_chunk,
                                  settings.max_chunk_delay)
        self.evaluation = EvalSchedule(self.rundir, self.rank, self.follower, self.progress, self.monitor, self.stop,
                                       self._flush, self._run_tasks, self.sync.follow, self._tick, self.waiter,
                                       lambda: [*self.follower.doorbells(), trainer_doorbell(self.rundir)])
        # The tokenizer and chat template are checked before minutes go into starting an engine.
        rm = settings.rollout_model
        prompts = setup.prompt_builder(settings, rm)
        version, path = self.follower.start_point(rm.model_path)
        # A LoRA run's policy is its base model with the version's adapter (at version 0, before the
        # trainer publishes, the adapter training starts from, if any).
        adapter = path if published.is_adapter_dir(path) else rm.lora.init_path if rm.lora is not None else None
        base = rm.model_path if rm.lora is not None else path
        log.info("explorer %s rank %d: starting %s engine on %s%s (policy version %d)", self.name, self.rank,
                 rm.engine_type, base, f" with adapter {adapter}" if adapter else "", version)
        plan = {POLICY_ENGINE: (rm.engine_type, setup.engine_settings(settings, rm, self.rank, base)),
                **{aux.name: (aux.engine_type, setup.engine_settings(settings, aux, self.rank))
                   for aux in settings.auxiliary_models if not aux.shared}}
        factory = self.engine_factory
        if self.time_share is not None:
            share = self.time_share
            log.info("explorer %s rank %d: time-sharing GPUs %s with the trainer (engines asleep between turns)",
                     self.name, self.rank, ",".join(share.turns.devices))

            def factory(kind: EngineType, engine: EngineSettings) -> PolicyEngine:
                return share.wrap(self.engine_factory(kind, dataclasses.replace(engine, enable_sleep_mode=True)))
        with self._turn():
            build_engines(plan, factory, process_gpus(), self.engines)
            if adapter:
                self.engines[POLICY_ENGINE].load_weights(Path(adapter))
            self.follower.attach(self.engines[POLICY_ENGINE], version)
        self.batcher = RequestBatcher(self.engines)
        self.ctx = WorkflowContext(
            engine=self.batcher.client(POLICY_ENGINE, max_n=settings.max_repeat_times_per_runner),
            prompts=prompts,
            auxiliary={aux.name: setup.auxiliary_model(settings, aux, self._auxiliary_engine(aux))
                       for aux in settings.auxiliary_models},
            endpoint_started=self._publish_endpoint,
        )
        if settings.teacher_model is not None:
            self.teacher = self.ctx.auxiliary[settings.teacher_model].engine
        self.progress.update(state="started", version=version)

    def _publish_endpoint(self, url: str) -> None:
        self.endpoint_file = publish_endpoint(self.rundir.root, self.name, self.rank, url)
        log.info("explorer %s rank %d: serving the policy to agents at %s (%s)", self.name, self.rank, url,
                 self.endpoint_file)

    def _auxiliary_engine(self, aux: InferenceModelSettings) -> RolloutEngine:
        """How workflows reach auxiliary model `aux`: its engine in this process, through the batcher, or,
        placed shared, its server job over HTTP."""
        if not aux.shared:
            return self.batcher.client(aux.name)
        log.info("explorer %s rank %d: auxiliary model %r is shared: its server's addresses are in %s",
                 self.name, self.rank, aux.name, self.rundir.servers / aux.name)
        remote = RemoteEngine(self.rundir.root, aux.name, aux.server_timeout, self.settings.min_response_tokens,
                              aux.max_model_len)
        return RemoteClient(self.batcher, remote)

    def _shutdown(self) -> None:
        try:
            if self.writer is not None:
                self.writer.close()
                self._complete_committed()
            for claims in self.claim_sets:
                claims.close()
        except Exception:
            log.exception("could not commit the last groups; their tasks will be redone by another explorer")
        self.follower.close()
        self.sync.withdraw()
        if self.endpoint_file is not None:
            withdraw_endpoint(self.endpoint_file)
        if self.monitor is not None:
            self.monitor.close()
        for engine in self.engines.values():
            engine.close(process_ending=self.process_ends)
        self.engines.clear()
        if self.time_share is not None:
            self.time_share.turns.release()
        self.stop.restore()

    def _run_stages(self, explore: list[ExplorerStageSettings]) -> int:
        last = explore[0].index
        for stage in explore:
            status = self._explore_stage(stage)
            last = stage.index
            if status is StageEnd.STOPPED:
                return self._stopped()
            if status is StageEnd.TRAINER_DONE:
                break
        self._flush()
        if self.evaluation.final(self.stages[last], self.tasksets[last][1]) is StageEnd.STOPPED:
            return self._stopped()
        self.phases.mark("final_eval")
        self.progress.update(state="done", version=self.follower.version)
        log.info("explorer %s rank %d: done (%d groups committed)", self.name, self.rank,
                 self.progress.record.groups_committed)
        return 0

    def _failed(self, error: EngineFailed) -> int:
        """Record and report an engine failure; the exit code that makes Slurm see a failed task."""
        self.progress.update(state="failed", error=str(error))
        log.error("explorer %s rank %d: exiting with %d (the tasks it held went back to the pool for another "
                  "explorer): %s", self.name, self.rank, EXIT_FAILED, error, exc_info=error)
        return EXIT_FAILED

    def _stopped(self) -> int:
        self._flush()
        self.progress.update(state="stopped", version=self.follower.version)
        log.warning("explorer %s rank %d: stopped by %s; exiting with %d for requeue",
                    self.name, self.rank, self.stop.reason, EXIT_PREEMPTED)
        return EXIT_PREEMPTED

    # ---- stages --------------------------------------------------------------------------------

    def _wait_for_stage(self, index: int) -> int | StageEnd:
        """The stage's start step once the trainer is in it; a status if it is past it or stopped."""
        def started() -> tuple[int | StageEnd] | None:
            view = read_trainer_meta(self.rundir)
            if view is not None and view.done:
                return (StageEnd.TRAINER_DONE,)
            if view is not None and view.stage_index > index:
                return (StageEnd.SKIPPED,)
            if view is not None and view.stage_index == index:
                return (view.stage_start_step,)
            if index == 0:
                return (0,)
            return None

        found = started()
        if found is None:
            self.progress.update(state="waiting_for_stage", stage=index)
            # Woken by the trainer's report of the new stage (its journal rings), or every weights_poll_interval.
            found = self.waiter.wait(started, [trainer_doorbell(self.rundir)], None, stop=lambda: self.stop.requested)
        return StageEnd.STOPPED if found is None else found[0]

    @staticmethod
    def _load_tasksets(stage: ExplorerStageSettings) -> tuple[list[setup.Taskset], list[setup.Taskset]]:
        return ([setup.load(ts, is_eval=False) for ts in stage.tasksets],
                [setup.load(ts, is_eval=True) for ts in stage.eval_tasksets])

    def _sources(self, stage: ExplorerStageSettings, tasksets: list[setup.Taskset]) -> list[_Source]:
        sizes = [len(ts.tasks) * ts.config.total_epochs for ts in tasksets]
        sources = []
        settings = self.settings
        for ts, name, (offset, limit) in zip(tasksets, stage.claim_sets, taskset_offsets(sizes, stage.max_tasks),
                                             strict=True):
            if limit == 0:
                continue
            claims = ClaimSet(
                self.rundir.root, name, len(ts.tasks), shards=stage.claim_shards, home=self.rank,
                total_epochs=ts.config.total_epochs, selector=ts.config.task_selector.selector_type,
                seed=ts.config.task_selector.seed, lease_s=settings.lease_s, lock=settings.lock_type,
                owner=self.owner, max_tasks=limit, ahead=stage.claim_batches,
            )
            sources.append(_Source(ts, claims, offset))
        return sources

    def _explore_stage(self, stage: ExplorerStageSettings) -> StageEnd:
        index = stage.index
        start = self._wait_for_stage(index)
        if isinstance(start, StageEnd):
            return start
        train, evals = self.tasksets[index]
        sources = self._sources(stage, train)
        self.claim_sets = [s.claims for s in sources]
        claim_size = stage.claim_size
        poll = self.settings.poll_interval_s
        self.stage_name = stage.name
        self.progress.update(state="exploring", stage=index, stage_name=stage.name)
        log.info("explorer %s rank %d: exploring stage %r (starts after trainer step %d), %d tasks per claim",
                 self.name, self.rank, stage.name, start, claim_size)
        try:
            self.sync.follow()
            self.evaluation.started(stage, evals)
            for source in self._with_refills(stage, sources):
                while True:
                    if self.stop.requested:
                        return StageEnd.STOPPED
                    view = read_trainer_meta(self.rundir)
                    if view is not None and view.done:
                        return StageEnd.TRAINER_DONE
                    if view is not None and view.stage_index > index:
                        return StageEnd.SKIPPED
                    claims = source.claims.claim(claim_size, timeout_s=max(5.0, poll), poll_s=poll,
                                                 on_wait=self._idle)
                    if not claims:
                        self._flush()
                        if source.claims.finished:
                            break
                        continue
                    status = self._explore_batch(stage, source, claims, start, evals)
                    if status is not None:
                        return status
        except Stopped:
            return StageEnd.STOPPED
        finally:
            self._flush()
            for source in sources:
                source.claims.close()
        return StageEnd.FINISHED

    def _with_refills(self, stage: ExplorerStageSettings, sources: list[_Source]) -> Iterator[_Source]:
        """The stage's sources in order; then again each time the trainer needs tasks replacing groups it lost."""
        yield from sources
        while self._await_refill(stage, sources):
            yield from sources

    def _await_refill(self, stage: ExplorerStageSettings, sources: list[_Source]) -> bool:
        """All tasks of the stage are done. While the trainer is still in the stage it may drop stale
        groups, and the claims then hand out fresh tasks in their place: wait for that. True when
        there are tasks to claim again; False when the stage is over for this explorer (the trainer
        is past it or absent, the tasksets' epochs ran out, or the trainer made no step for
        synchronizer.sync_timeout)."""
        step, since = None, time.monotonic()

        def refilled() -> tuple[bool] | None:
            nonlocal step, since
            statuses = [s.claims.status() for s in sources]
            if not all(st.finished for st in statuses):
                return (True,)
            view = read_trainer_meta(self.rundir)
            if all(st.exhausted for st in statuses) or view is None or view.done or view.stage_index != stage.index:
                return (False,)
            if view.step != step:
                step, since = view.step, time.monotonic()
                self.progress.update(state="waiting_for_trainer")
            elif time.monotonic() - since > stage.sync_timeout:
                log.warning("explorer %s rank %d: every task is done and the trainer made no step for %.0f s "
                            "(synchronizer.sync_timeout); leaving stage %r", self.name, self.rank,
                            stage.sync_timeout, self.stage_name)
                return (False,)
            self._idle()
            return None

        # The trainer reports its losses (the refill) as it takes groups: woken by its reports, or every
        # poll_interval_s. A stop unwinds through `_idle`.
        found = Waiter(WaitPolicy(slow_s=self.settings.poll_interval_s)).wait(refilled, [trainer_doorbell(self.rundir)],
                                                                            None)
        return bool(found and found[0])

    # ---- one batch -----------------------------------------------------------------------------

    def _explore_batch(
        self, stage: ExplorerStageSettings, source: _Source, claims: list[Claim], stage_start: int,
        evals: list[setup.Taskset],
    ) -> StageEnd | None:
        with _Unsettled(source.claims, claims) as held:
            return self._explore_held(stage, source, held, stage_start, evals)

    def _explore_held(
        self, stage: ExplorerStageSettings, source: _Source, held: _Unsettled, stage_start: int,
        evals: list[setup.Taskset],
    ) -> StageEnd | None:
        """Explore a batch of claims; those it neither completes nor hands to the writer (a stop, a
        wait that ends, a failed engine, a group the writer refuses) go back to the pool on leaving."""
        claims = held.claims
        bs = stage.batch_size
        steps = [expected_train_step(stage_start, c.position, bs, source.offset) for c in claims]
        need = required_version(max(steps), stage.max_staleness)
        # explorer_driven: the wait for the trainer's answer after the previous batch counts as this one's.
        wait_s = self.sync.take_asked_s()
        if stage.sync_style == "fixed":
            self.sync.follow()
        now = servable(steps, stage.max_staleness, self.follower.version)
        if 0 < len(now) < len(claims):
            # Tasks of an earlier trainer step beside later ones (see `servable`): the earlier go now with the
            # policy held, the later back to the pool (on leaving), to wait for their version in a later batch.
            claims, steps = [claims[i] for i in now], [steps[i] for i in now]
        elif self.follower.version < need:
            self._flush()
            began = time.monotonic()
            status = self.sync.wait_for_version(need, stage)
            if status is not None:
                return status
            wait_s += time.monotonic() - began
        version = self.follower.version
        tasks = [source.taskset.tasks[c.index] for c in claims]
        # ReMax: one greedy response per task, scored alike, generated in the same engine calls.
        greedy = [_greedy(t) for t in tasks] if stage.greedy_baseline else []
        # An evaluation due rides along: its tasks generate in the same engine calls as the batch's. The
        # start-up evaluation waits until this batch is committed instead: the trainer's first step needs
        # the batch, and the explorer evaluates while that step trains.
        startup_eval = self.evaluation.startup_due(evals)
        extra = eval_tasks(evals) if self.evaluation.due(stage, evals) and not startup_eval else []
        began = time.perf_counter()
        # A failed engine raises here: the tasks are not at fault, so they are released, not completed
        # (no refill replaces them), for another explorer or this one requeued.
        outcomes = self._run_tasks(tasks + greedy + extra)
        elapsed = time.perf_counter() - began
        n, m = len(claims), len(claims) + len(greedy)
        outcomes, baselines, evaluated = outcomes[:n], outcomes[n:m] or [None] * n, outcomes[m:]
        empty, filtered, groups = [], [], []
        for claim, step, outcome, baseline in zip(claims, steps, outcomes, baselines, strict=True):
            if outcome.cancelled or (baseline is not None and baseline.cancelled):
                continue  # released on leaving
            if outcome.result is None or not outcome.result.experiences or (baseline is not None and (
                    baseline.result is None or not baseline.result.experiences)):
                empty.append(claim)
            elif self._shape(stage, outcome, baseline):
                groups.append((claim, self._group(outcome, claim, version, step, baseline)))
            else:
                filtered.append(claim)
        if empty or filtered:
            # Tasks that gave no group to train: the claim set hands out fresh tasks in their places
            # (the refill), so the trainer still gets its groups per step.
            source.claims.complete(empty + filtered, produced_group=False, defer=True)
            held.settle(empty + filtered)
            self.progress.add(tasks_completed=len(empty) + len(filtered), groups_filtered=len(filtered))
        assert self.writer is not None
        for claim, group in groups:
            before = self.writer.groups_added
            try:
                self.writer.add(group)
            finally:
                # A group the writer did not take (bad workflow output) stays unsettled: its task, and
                # those after it, go back to the pool instead of counting as done.
                if self.writer.groups_added > before:
                    self.pending.append(_Pending(source.claims, claim))
                    held.settle([claim])
            self._complete_committed()
        # Commit the batch now rather than when the chunk fills: the trainer may be waiting for
        # exactly these groups, and holding them while the next batch generates would serialise
        # generation and training (the asynchronous pipeline would stall every other step).
        self._flush()
        self._log_batch(outcomes, groups, steps, version, elapsed, wait_s, source.taskset.name,
                        filtered=len(filtered), baselines=[b for b in baselines if b is not None])
        self._check_generation_budget(stage, len(groups) + len(filtered), len(groups))
        if self.stop.requested:
            return StageEnd.STOPPED
        if extra:
            self.evaluation.log(evals, evaluated, elapsed)
        elif startup_eval:
            self.evaluation.evaluate(evals)
            self.phases.mark("startup_eval")
        return self.sync.after_batch(stage)

    def _shape(self, stage: ExplorerStageSettings, outcome: TaskOutcome, baseline: TaskOutcome | None) -> bool:
        """Add the overlong penalty to the group's rewards (and the greedy baseline's); False if dynamic
        sampling drops the group (its responses all score the same)."""
        assert outcome.result is not None
        experiences = outcome.result.experiences
        scores = [e.reward for e in experiences]
        if stage.overlong is not None:
            stage.overlong.apply(experiences)
            if baseline is not None and baseline.result is not None:
                stage.overlong.apply(baseline.result.experiences)
        return stage.filter_groups is None or stage.filter_groups.keeps(experiences, scores)

    def _check_generation_budget(self, stage: ExplorerStageSettings, judged: int, kept: int) -> None:
        """`filter_groups.max_num_gen_batches`: veRL's bound on the batches generated to fill one trainer
        batch, per explorer: its share of a batch is `claim_size` kept groups. Raises once that many
        batches kept less than a share. `judged`: the batch's groups dynamic sampling kept or dropped (a
        batch cut short by a stop, with none, does not count)."""
        limit = stage.filter_groups.max_num_gen_batches if stage.filter_groups is not None else 0
        if not limit or not judged:
            return
        self._kept_since_share += kept
        self._batches_since_share += 1
        if self._kept_since_share >= stage.claim_size:
            # A share of a trainer batch is filled: count the next one's batches from here.
            self._kept_since_share %= stage.claim_size
            self._batches_since_share = 0
        elif self._batches_since_share >= limit:
            raise GenerationBudgetExceeded(
                f"explorer {self.name} rank {self.rank}: {self._batches_since_share} batches explored kept "
                f"{self._kept_since_share} group(s), fewer than its share of one trainer batch ({stage.claim_size}): "
                f"dynamic sampling (algorithm.filter_groups, metric {stage.filter_groups.metric!r}) drops the "
                "groups whose responses all score the same, and nearly all do; the tasks are too easy or too "
                "hard for the policy. Check the data and the reward, or raise "
                "algorithm.filter_groups.max_num_gen_batches (0: no limit)"
            )

    def _group(self, outcome: TaskOutcome, claim: Claim, version: int, step: int,
               baseline: TaskOutcome | None = None) -> Group:
        assert outcome.result is not None
        task, result = outcome.task, outcome.result
        params = task.rollout_args
        experiences = [
            StoredExperience(
                prompt_ids=np.asarray(e.prompt_token_ids, dtype=np.int32),
                response_ids=np.asarray(e.response_token_ids, dtype=np.int32),
                logprobs=np.asarray(e.logprobs, dtype=np.float32),
                loss_mask=np.asarray(e.loss_mask, dtype=np.int8),
                reward=e.reward,
                token_rewards=None if e.token_level_rewards is None
                else np.asarray(e.token_level_rewards, dtype=np.float32),
                info={**e.info, "finish_reason": e.finish_reason, "reward_components": e.reward_components,
                      "response_text": e.response_text},
                teacher_logprobs=None if e.teacher_logprobs is None
                else np.asarray(e.teacher_logprobs, dtype=np.float32),
            )
            for e in result.experiences
        ]
        info: dict[str, Any] = {
            **result.info,
            "taskset": task.taskset, **TaskRef(claim.taskset, claim.epoch, claim.index).info(),
            "serial": claim.serial,
            "stage": self.stage_name, "expected_step": step, "workflow": task.workflow,
            # The trainer divides its logits by this temperature so its logprobs match the stored ones;
            # below vLLM's greedy threshold the engines decode greedily, logprobs of the plain logits.
            "temperature": 0.0 if is_greedy(params.temperature) else params.temperature,
            "top_p": params.top_p, "top_k": params.top_k,
            "max_tokens": params.max_tokens,
        }
        if baseline is not None:
            assert baseline.result is not None
            info[BASELINE_REWARD] = baseline.result.experiences[0].reward
        return Group(
            task_id=task.task_id, experiences=experiences, policy_version=version, explorer=self.name,
            rank=self.rank, created_at=outcome.started, finished_at=outcome.finished, info=info,
        )

    # ---- bookkeeping ---------------------------------------------------------------------------

    def _run_tasks(self, tasks: list[Task]) -> list[TaskOutcome]:
        """Run the tasks' workflows in this process's engines, their generate calls batched (time-sharing the
        GPUs: in one turn, given up when they are done, the trainer being about to need them)."""
        with self._turn():
            return run_tasks(tasks, self.ctx, self.batcher, _rollout_policy(self.settings), self.stop,
                             tick=self._tick, teacher=self.teacher)

    def _turn(self) -> AbstractContextManager[None]:
        """This process's turn on its GPUs for a block (time-sharing them; else nothing to take)."""
        return self.time_share.turn() if self.time_share is not None else nullcontext()

    def _complete_committed(self) -> None:
        """Complete the claims whose groups the writer has committed (all but the last `buffered`)."""
        assert self.writer is not None
        committed = len(self.pending) - self.writer.buffered
        if committed <= 0:
            return
        done, self.pending = self.pending[:committed], self.pending[committed:]
        for claims in {id(p.claims): p.claims for p in done}.values():
            # Settled in the claim set's next transaction (a claim, a heartbeat, or close at the stage's end).
            claims.complete([p.claim for p in done if p.claims is claims], defer=True)
        self.progress.add(groups_committed=committed, tasks_completed=committed)

    def _flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            self._complete_committed()

    def _tick(self) -> None:
        """Periodic duty while workflows run or the explorer waits: commits that are due (leases are
        the heartbeat thread's)."""
        if self.writer is not None:
            self.writer.flush_if_due()
            self._complete_committed()

    def _idle(self) -> None:
        """Called while no task can be claimed: commit what is buffered (others may wait for it)."""
        if self.stop.requested:
            raise Stopped()
        self._flush()

    def _log_batch(self, outcomes: list[TaskOutcome], groups: list[tuple[Claim, Group]], steps: list[int],
                   version: int, elapsed: float, wait_s: float, taskset: str, filtered: int = 0,
                   baselines: Sequence[TaskOutcome] = ()) -> None:
        rewards = np.concatenate([g.rewards for _, g in groups]) if groups else np.zeros(0)
        resp = [len(e.response_ids) for _, g in groups for e in g.experiences]
        prompt = [len(e.prompt_ids) for _, g in groups for e in g.experiences]
        tokens = int(sum(resp))
        stal = [staleness(s, version) for s in steps]
        metrics: dict[str, Any] = {
            "rollout/version": version,
            "rollout/expected_step": max(steps),
            "rollout/staleness": float(np.mean(stal)),
            "rollout/staleness_max": max(stal),
            "rollout/groups": len(groups),
            "rollout/tasks": len(outcomes),
            "rollout/failed_tasks": sum(o.error is not None for o in outcomes)
            + sum(b.error is not None and o.error is None for o, b in zip(outcomes, baselines)),
            "rollout/filtered_groups": filtered,
            "rollout/cancelled_tasks": sum(o.cancelled for o in outcomes),
            "rollout/reward_errors": sum("reward_error" in g.info for _, g in groups),
            "rollout/prompt_truncated": sum(bool(g.info.get("prompt_truncated")) for _, g in groups),
            "rollout/prompt_skipped": sum(o.result is not None and "skipped" in o.result.info for o in outcomes),
            # Episodes an agent failed (agent_workflow): dropped from their groups.
            "rollout/failed_episodes": sum(int(o.result.info.get("failed_episodes", 0)) for o in outcomes
                                           if o.result is not None),
            "rollout/tokens": tokens,
            "rollout/tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
            "rollout/time_s": elapsed,
            "rollout/wait_s": wait_s,
            **self.sync.metrics(),
        }
        if self.time_share is not None:
            metrics["rollout/gpu_turns"] = self.time_share.handoffs
            metrics["rollout/gpu_turn_wait_s"] = self.time_share.waited_s
        if rewards.size:
            metrics.update({
                "rollout/reward_mean": float(rewards.mean()), "rollout/reward_std": float(rewards.std()),
                "rollout/reward_max": float(rewards.max()), "rollout/reward_min": float(rewards.min()),
                "rollout/response_length": float(np.mean(resp)), "rollout/prompt_length": float(np.mean(prompt)),
                "rollout/finish_length_ratio": float(np.mean(
                    [e.info.get("finish_reason") == "length" for _, g in groups for e in g.experiences])),
            })
        scored = [b.result.experiences[0].reward for b in baselines if b.result is not None and b.result.experiences]
        if scored:
            metrics["rollout/baseline_reward_mean"] = float(np.mean(scored))
        if self.phases is not None and "first_batch" not in self.phases.times:
            self.phases.mark("first_batch")
            metrics.update(self.phases.seconds())
        metrics.update(episode_metrics("rollout", (e.info for _, g in groups for e in g.experiences)))
        metrics.update(judge_metrics("rollout", (e.info for _, g in groups for e in g.experiences)))
        step = self.progress.record.steps + 1
        assert self.monitor is not None
        self.monitor.log(metrics, step=step, axis="rollout/step")
        self.progress.update(steps=step, version=version, tokens_per_s=metrics["rollout/tokens_per_s"],
                             taskset=taskset)
