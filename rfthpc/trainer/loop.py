"""The training loop: stages in order, one step at a time, publishing, checkpointing, stopping cleanly.

A step (global step t, the trainer holding policy version t - 1):
 1. rank 0 takes a batch (experience groups from the store, or SFT rows, or DPO pairs), checks it
    and hands it to every rank;
 2. forward passes without gradients where the algorithm needs them: the reference model's
    log-probabilities (KL, DPO; with LoRA the policy with its adapter switched off), the policy's
    before the update (PPO's ratio, when the step makes several updates; DPO's pair partners; with
    sum_v pi_v^2 for an advantage that declares it, the optimal token baseline), the critic's
    values (GAE);
 3. rewards are shaped and advantages computed (every rank, whole batch); responses the advantage
    leaves out (grpo's std_threshold) leave the loss masks;
 4. the critic, then the policy, take `ppo_epochs` passes of mini-batch updates;
 5. every `sync_interval` steps of an RL stage the policy is published under `weights/step_<t>`
    (`sync_style: explorer_driven`: when an explorer asked for weights, `rfthpc.weights.asking`;
    the trainer also looks for requests while it waits for experience);
 6. every `save_interval` steps, at the end of each stage and on SIGTERM/SIGUSR2 a checkpoint is
    written (then a signal makes the trainer exit with 124 to be requeued).
A NaN/inf loss or gradient abandons the batch: that update makes no optimizer step, the rest of the
batch is dropped, no step is counted and nothing is published; it is logged and counted
(`trainer/nan_skipped_batches`). Updates the step made before it (earlier mini-batches or epochs,
the critic's) stay applied, and their number is logged (`trainer/nan_updates_kept`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rfthpc.config import load_resolved
from rfthpc.config.settings import TrainerSettings, TrainerStageSettings, trainer_settings
from rfthpc.engines.time_sharing import GpuTurns, device_ids, turns_dir
from rfthpc.errors import EXIT_PREEMPTED, UserError
from rfthpc.rundir.paths import RunDir, check_layout
from rfthpc.rundir.phases import PhaseLog
from rfthpc.rundir.trainer_meta import TrainerMeta, write_trainer_meta
from rfthpc.sharedfs.fileops import set_share_group
from rfthpc.sharedfs.mounts import log_filesystem
from rfthpc.signals import StopRequest
from rfthpc.trainer import checkpoint as ckpt
from rfthpc.trainer.batching import mini_batches, plan_micro_batches
from rfthpc.trainer.checkpoint_meta import CheckpointMeta, read_checkpoint_meta
from rfthpc.trainer.dist import DistEnv, init_distributed
from rfthpc.trainer.experience import ExperienceSource, Poll
from rfthpc.trainer.forward import (
    packs_samples,
    sharded_forward,
    token_logprobs,
    token_logprobs_and_stats,
    token_values,
)
from rfthpc.trainer.fsdp import build_sharded_model, compute_dtype, publish_model, vocab_size
from rfthpc.trainer.lora import AdapterDisabled, adapter_config
from rfthpc.trainer.losses import Algorithm
from rfthpc.trainer.optim import LRSchedule, make_optimizer, set_lr
from rfthpc.trainer.rl_batch import StepTensors, build_step_tensors
from rfthpc.trainer.samples import Sample, explorer_teacher_scores
from rfthpc.trainer.sequence_parallel import sequence_group
from rfthpc.trainer.sft_data import PreferenceData, SFTData, load_tokenizer
from rfthpc.trainer.stages import Position, next_trainable, resume_position
from rfthpc.trainer.time_sharing import TrainerTurns
from rfthpc.trainer.update import LossPart, ShardedUpdater, UpdateResult
from rfthpc.weights import asking, chain, node_local, published
from rfthpc.weights.publisher import Publication, Publisher

log = logging.getLogger(__name__)

EXIT_DONE = 0
EXIT_FAILED = 1
MAX_CONSECUTIVE_NAN_BATCHES = 10
"""Abandoned batches in a row after which the trainer gives up (the model itself is likely broken)."""


class _SFTSource:
    """Rank 0's SFT batches, in the shape of `ExperienceSource.poll`."""

    def __init__(self, data: SFTData, n: int) -> None:
        self.data, self.n = data, n

    def poll(self, current_version: int) -> Poll:
        return Poll("batch", self.data.take(self.n))


@dataclass
class _StageState:
    """What one stage needs while it runs."""

    stage: TrainerStageSettings
    algorithm: Algorithm
    total_steps: int | None
    actor: ShardedUpdater
    schedule: LRSchedule
    reference: torch.nn.Module | AdapterDisabled | None = None
    teacher: torch.nn.Module | None = None
    """On-policy distillation's frozen teacher (an advantage declared teacher=True)."""
    critic: ShardedUpdater | None = None
    critic_schedule: LRSchedule | None = None
    source: Any = None
    sft: SFTData | None = None

    @property
    def is_rl(self) -> bool:
        return not self.algorithm.is_sft


class Trainer:
    """Runs the trainer role over the stages of the run in `run_dir` (every rank creates one)."""

    def __init__(self, run_dir: Path, env: DistEnv, phases: PhaseLog | None = None,
                 node_local_weights: bool = False, time_share_gpus: bool = False) -> None:
        """`node_local_weights`: explorers share this node; leave each published version in node-local
        memory for them too (rfthpc.weights.node_local). `time_share_gpus`: take turns on the node's GPUs with
        those explorers, the trainer's state in CPU memory while it waits for experience
        (rfthpc.trainer.time_sharing)."""
        self.rundir = RunDir(run_dir)
        self.node_local_weights = node_local_weights
        self.env = env
        self.phases = phases or PhaseLog(run_dir, "trainer", enabled=False)
        """Start-up and shutdown phases (rfthpc.rundir.phases), reported by rank 0."""
        self._last_step_end: float | None = None
        if not self.rundir.config.is_file():
            raise UserError(f"{self.rundir.root} has no {self.rundir.config.name}; pass the run directory that "
                            "`rfthpc submit` or `rfthpc run` created (--run-dir)")
        check_layout(self.rundir)
        self.settings: TrainerSettings = trainer_settings(load_resolved(self.rundir.config).stages)
        self.stages = self.settings.stages
        set_share_group(self.settings.share_group)
        if env.is_main:
            log_filesystem(self.rundir.root, None, log)
        self.stop = StopRequest("the trainer will checkpoint and stop after the current step")
        self.monitor = None
        self.reader = None
        self.nan_batches = 0
        self.nan_consecutive = 0
        self.last_saved: tuple[int, bool] | None = None
        self.policy: torch.nn.Module | None = None
        self.publisher: Publisher | None = None
        """Rank 0's weight publisher (it keeps the last published bits for the next delta)."""
        self.publication: Publication | None = None
        """What the last publication wrote (rank 0)."""
        self.meta: TrainerMeta | None = None
        """The last report written to `trainer_meta/` (rank 0)."""
        self.requests = asking.RequestDesk(self.rundir.root) if env.is_main else None
        """Rank 0's view of the explorers' requests for weights (`sync_style: explorer_driven`)."""
        self.current: _StageState | None = None
        """The stage running now."""
        self.turns: TrainerTurns | None = None
        if time_share_gpus:
            directory = turns_dir(node_local.staging_root(self.settings.staging_dir), self.rundir.root)
            devices = device_ids()
            own = GpuTurns(directory, devices, "trainer") if env.is_main else None
            self.turns = TrainerTurns(own, env, self._holdings, move_models=not self.settings.cpu_offload)
            log.info("time-sharing GPUs %s with the explorers on them: the trainer's state goes to CPU memory "
                     "while it waits for experience", ",".join(devices))

    # ---- entry ---------------------------------------------------------------------------------

    def run(self) -> int:
        """Train every remaining stage; return 0 (done), 124 (stopped by a signal) or 1 (failed)."""
        self.stop.install()
        code = EXIT_FAILED
        try:
            with self._turn():
                code = self._run()
            return code
        finally:
            self._report_end(code)
            if self.publisher is not None:
                self.publisher.close()
            self.stop.restore()
            if self.monitor is not None:
                self.monitor.close()

    def _run(self) -> int:
        meta = self._resume_meta()
        pos = resume_position(self.stages, meta)
        if pos is None:
            if meta is not None:
                self._write_trainer_meta(Position(meta.stage_index, meta.stage_start_step, meta.step), done=True)
            return EXIT_DONE
        self.last_saved = (meta.step, meta.stage_finished) if meta else None
        run = self.settings
        if self.env.is_main:
            from rfthpc.observe.monitor import Monitor
            from rfthpc.store import StoreReader

            self.monitor = Monitor(self.rundir, "trainer", run.monitor, run.project, run.name)
            self.reader = StoreReader(self.rundir.root, poll_s=min(0.5, run.poll_interval_s))
            if meta and meta.reader is not None:
                self.reader.load_state(meta.reader)
        if run.sequence_parallel_size > 1:
            self.env = dataclasses.replace(self.env, sequence=sequence_group(self.env.world_size, self.env.device.type,
                                                                              run.sequence_parallel_size))
            log.info("sequence parallelism: %d replica(s) of %d ranks, each rank holding 1/%d of every sequence",
                     self.env.dp_size, run.sequence_parallel_size, run.sequence_parallel_size)
        self.policy = build_sharded_model(run.model_path, self.env, dtype=run.dtype,
                                          gradient_checkpointing=run.gradient_checkpointing,
                                          cpu_offload=run.cpu_offload, lora=run.lora)
        self.phases.mark("model")
        if meta:
            ckpt.load_model_weights(self.rundir.checkpoint(meta.step) / "actor" / "model", self.policy,
                                    adapter_only=run.lora is not None)
            ckpt.restore_rng(self.rundir.root, meta.step, self.env)
            self.nan_batches = meta.nan_skipped_batches
        while pos is not None:
            mid_stage = meta if meta and not meta.stage_finished and meta.stage_index == pos.stage_index else None
            code, pos = self._run_stage(pos, mid_stage)
            if code != EXIT_DONE:
                return code
            meta = None
        return EXIT_DONE

    def _resume_meta(self) -> CheckpointMeta | None:
        def newest() -> CheckpointMeta | None:
            ckpt.remove_temporary(self.rundir.root)
            step = ckpt.latest_checkpoint(self.rundir.root)
            if step is not None and not self.settings.continue_from_checkpoint:
                log.warning("continue_from_checkpoint is false: starting over, ignoring checkpoint %d", step)
                step = None
            return read_checkpoint_meta(self.rundir.root, step) if step is not None else None

        return self.env.on_main(newest)

    # ---- stages --------------------------------------------------------------------------------

    def _run_stage(self, pos: Position, meta: CheckpointMeta | None) -> tuple[int, Position | None]:
        """Run the stage at `pos` (from checkpoint `meta` if resuming inside it); return the exit
        code and the next position (None: no stage left)."""
        st = self.current = self._setup_stage(self.stages[pos.stage_index], pos, meta)
        log.info("stage %r (%s) from global step %d", st.stage.name, st.algorithm.algorithm_type, pos.step)
        if st.is_rl and pos.step == pos.stage_start_step:
            self._publish(pos.step, st.stage)
        self._write_trainer_meta(pos)
        finished = False
        while not finished:
            if st.total_steps is not None and pos.step_in_stage >= st.total_steps:
                break
            began = time.perf_counter()
            poll = self._fetch(st, pos)
            waited = time.perf_counter() - began
            if poll.status == "stop":
                self._save(st, pos, stage_finished=False)
                log.warning("stopped by a signal at step %d after a checkpoint; requeue to continue", pos.step)
                return EXIT_PREEMPTED, None
            if poll.status == "exhausted":
                log.warning("stage %r ends at step %d of %s: %s", st.stage.name, pos.step,
                            pos.stage_start_step + st.total_steps if st.total_steps is not None else "its data",
                            poll.message)
                break
            if poll.status == "timeout":
                self._save(st, pos, stage_finished=False)
                log.error("stage %r: %s", st.stage.name, poll.message)
                return EXIT_FAILED, None
            metrics = self._train_step(st, pos, poll.samples)
            if metrics is None:
                continue
            self._last_step_end = time.time()
            pos.step += 1
            # The step's timeline (docs/performance.md): waiting for experience, computing, publishing
            # and checkpointing add up to the time since the previous step's record.
            timeline = {"timing/wait_experience_s": waited, "timing/compute_s": metrics["perf/time_per_step"]}
            if self.turns is not None:
                # Part of the wait for experience: the turn on the GPUs after the experience came.
                timeline["timing/gpu_turn_wait_s"] = self.turns.take_waited()
            began = time.perf_counter()
            publish = self._publish_due(st, pos)
            timeline["timing/publish_s"] = time.perf_counter() - began if publish else 0.0
            if publish and self.publication is not None:
                timeline["publish/full_mb"] = self.publication.full_bytes / 1e6
                timeline["publish/delta_mb"] = self.publication.delta_bytes / 1e6
            finished = st.total_steps is not None and pos.step_in_stage >= st.total_steps
            interval = st.stage.save_interval
            save = finished or (interval > 0 and pos.step % interval == 0)
            timeline["timing/checkpoint_s"] = _timed(self._save, st, pos, stage_finished=finished) if save else 0.0
            if "first_step" not in self.phases.times:
                self.phases.mark("first_step", self._last_step_end)
                timeline.update(self.phases.seconds())
            self._log({**metrics, **timeline}, pos.step)
            self._write_trainer_meta(pos)
        # Rank 0 decides: every rank must take part in a publication (it gathers the weights).
        if st.is_rl and self.env.broadcast_object(published.read_latest(self.rundir.root) != pos.step):
            self._publish(pos.step, st.stage)
        if st.is_rl and st.stage.sync_style == "explorer_driven":
            self._serve_requests(st, pos)  # explorers asking now get the stage's final policy
        if next_trainable(self.stages, pos.stage_index + 1) is None and self._last_step_end is not None:
            self.phases.mark("last_step", self._last_step_end)
        self._save(st, pos, stage_finished=True)
        following = next_trainable(self.stages, pos.stage_index + 1)
        nxt = None if following is None else Position(following, pos.step, pos.step)
        if nxt is None:
            self.phases.mark("final_checkpoint")
            self._write_trainer_meta(pos, done=True)
        return EXIT_DONE, nxt

    def _setup_stage(self, stage: TrainerStageSettings, pos: Position, meta: CheckpointMeta | None) -> _StageState:
        alg = Algorithm.from_settings(stage.algorithm)
        padding_free = stage.use_remove_padding and packs_samples(self.policy)
        split = self.env.sequence.size if self.env.sequence is not None else 1
        if split > 1 and not padding_free:
            raise UserError(f"stage {stage.name!r}: trainer.ulysses_sequence_parallel_size {split} splits padding-free "
                            "micro-batches; set trainer.use_remove_padding: true (or the size to 1)")
        if stage.use_remove_padding and not padding_free:
            log.info("padding-free micro-batches are off: %s with %s attention does not confine attention to each "
                     "sample of a packed row", self.policy.config.model_type, self.policy.config._attn_implementation)
        planner = functools.partial(
            # A sequence-parallel group is one data-parallel replica: it takes one share of a batch, and
            # its micro-batches the tokens of its `split` GPUs (veRL's budget too).
            _plan, world_size=self.env.dp_size,
            token_budget=None if stage.token_budget is None else stage.token_budget * split,
            micro_batch_size=stage.ppo_micro_batch_size_per_gpu,
            # The policy under gradient checkpointing keeps no keys and values to share a prompt's:
            # padding-free micro-batches are then always the cheaper. Split rows are packed.
            share_prompts=stage.share_prompt_forward and split == 1
            and not (padding_free and self.settings.gradient_checkpointing),
            padding_free=padding_free,
        )
        optimizer = make_optimizer(self.policy, stage.algorithm.optimizer)
        n = stage.train_batch_size
        sft = None
        total = stage.total_steps
        if alg.is_sft or stage.expert_data is not None:
            # The stage's dataset: an sft or dpo stage's, or a mix stage's expert rows.
            rows: int | str | None = None
            if self.env.is_main:
                try:
                    tokenizer = load_tokenizer(self.settings.model_path, stage.chat_template)
                    data_class = PreferenceData if alg.is_preference else SFTData
                    data = stage.sft_data if alg.is_sft else stage.expert_data
                    sft = data_class(data, tokenizer, self._max_length(stage), enable_thinking=stage.enable_thinking)
                    rows = len(sft)
                except UserError as e:
                    rows = str(e)
                if meta and meta.sft_data and sft is not None:
                    sft.load_state_dict(meta.sft_data)
            rows = self.env.broadcast_object(rows)
            if isinstance(rows, str):
                raise UserError(rows)
            if total is None and alg.is_sft:
                total = max(1, rows * stage.total_epochs // n)
        updater = ShardedUpdater(self.policy, optimizer, self.env, planner, alg.weight, stage.grad_clip,
                                 lambda model, mb: token_logprobs(model, mb)[0], alg.averaged)
        st = _StageState(stage, alg, total, updater, LRSchedule.from_settings(stage.algorithm.optimizer, total))
        st.sft = sft
        if sft is not None and alg.is_sft:
            st.source = _SFTSource(sft, n)
        if st.is_rl and self.env.is_main:
            self.reader.max_staleness = stage.max_staleness
            self.reader.replay = stage.replay
            poll_s = self.settings.poll_interval_s
            st.source = ExperienceSource(
                self.rundir.root, self.reader, stage.groups_per_step, list(stage.claim_sets),
                vocab_size=vocab_size(self.policy), max_length=self._max_length(stage),
                temperature=stage.sampling_temperature, timeout_s=stage.read_timeout_s,
                poll_s=max(1.0, 2 * poll_s), grace_s=stage.chunk_delay_s + 2 * poll_s,
            )
        if alg.use_reference:
            st.reference = self._reference_model(pos)
        if alg.advantage_needs.teacher and self.settings.teacher_model_path is not None:
            st.teacher = self._teacher_model()
        if alg.use_critic:
            st.critic, st.critic_schedule = self._critic(stage, alg, planner, total, meta)
        if meta:
            ckpt.load_optimizer_state(self.rundir.checkpoint(meta.step) / "actor" / "optim", self.policy, optimizer)
            if alg.kl_controller is not None and meta.kl_controller is not None:
                alg.kl_controller.value = meta.kl_controller
        return st

    def _reference_model(self, pos: Position) -> torch.nn.Module | AdapterDisabled:
        """The frozen policy as it was when the stage began: the initial model for a first stage,
        else the checkpoint written at the end of the previous stage (kept while this stage runs).
        With LoRA it is the base model, in every stage: the policy with its adapter switched off."""
        if self.settings.lora is not None:
            return AdapterDisabled(self.policy)
        ref = build_sharded_model(self.settings.model_path, self.env, dtype=self.settings.dtype, trainable=False)
        if pos.stage_start_step > 0:
            source = self.rundir.checkpoint(pos.stage_start_step) / "actor" / "model"
            if not source.is_dir():
                raise UserError(
                    f"the KL reference of this stage is the policy at its start (step {pos.stage_start_step}), "
                    f"but checkpoint {source.parent.parent} is gone; restore it, or set algorithm.kl_loss_fn and "
                    "kl_penalty_fn to none"
                )
            ckpt.load_model_weights(source, ref)
        return ref

    def _teacher_model(self) -> torch.nn.Module:
        """The frozen teacher at `model.teacher_model_path`, sharded like the reference model."""
        assert self.settings.teacher_model_path is not None
        return build_sharded_model(self.settings.teacher_model_path, self.env, dtype=self.settings.dtype,
                                   trainable=False)

    def _critic(self, stage: TrainerStageSettings, alg: Algorithm, planner, total: int | None,
                meta: CheckpointMeta | None) -> tuple[ShardedUpdater, LRSchedule]:
        run = self.settings
        critic = build_sharded_model(run.critic_model_path, self.env, kind="value", dtype=run.dtype,
                                     gradient_checkpointing=run.gradient_checkpointing, cpu_offload=run.cpu_offload)
        if planner.keywords["padding_free"] and not packs_samples(critic):
            raise UserError(
                f"trainer.use_remove_padding: the policy takes padding-free micro-batches but the critic "
                f"{run.critic_model_path} ({critic.config.model_type}, {critic.config._attn_implementation} attention) "
                "does not; set trainer.use_remove_padding: false"
            )
        optimizer = make_optimizer(critic, stage.algorithm.optimizer, lr=stage.critic_lr)
        if meta:
            root = self.rundir.checkpoint(meta.step) / "critic"
            ckpt.load_model_weights(root / "model", critic)
            ckpt.load_optimizer_state(root / "optim", critic, optimizer)
        schedule = LRSchedule(stage.critic_lr, total, -1, stage.critic_lr_warmup_steps_ratio, key="trainer.critic")
        return ShardedUpdater(critic, optimizer, self.env, planner, alg.weight, stage.grad_clip, token_values,
                              alg.averaged), schedule

    def _max_length(self, stage: TrainerStageSettings) -> int | None:
        limits = [getattr(self.policy.config, "max_position_embeddings", None), stage.token_budget]
        limits = [x for x in limits if x]
        return min(limits) if limits else None

    # ---- one step ------------------------------------------------------------------------------

    def _fetch(self, st: _StageState, pos: Position) -> Poll:
        """The next batch on every rank, polling (collectively) until one arrives or the loop must stop
        (time-sharing the GPUs: without them meanwhile, while explorers generate it)."""
        with self._away() if st.is_rl else nullcontext():
            return self._poll(st, pos)

    def _poll(self, st: _StageState, pos: Position) -> Poll:
        while True:
            if self.env.any(self.stop.requested):
                return Poll("stop")
            def poll_store() -> Poll:
                poll = st.source.poll(pos.step)
                poll.groups = []  # every rank needs the samples only
                if poll.status == "batch" and st.is_rl and st.sft is not None:
                    poll.samples += _expert_rows(st.sft.take(st.stage.expert_rows), st.stage.sampling_temperature)
                return poll

            poll = self.env.on_main(poll_store)
            if poll.status != "wait":
                return poll
            if st.is_rl and st.stage.sync_style == "explorer_driven":
                # As Trinity-RFT's trainer, it answers while it waits: the explorers asking may be the
                # ones whose experience it waits for.
                self._serve_requests(st, pos)

    def _updates(self, pos: Position, updater: ShardedUpdater, role: str, batches: list[list[LossPart]],
                 samples: list[Sample], mask: torch.Tensor, results: list[UpdateResult]) -> bool:
        """Run `updater` over the mini-batches `batches` (each its loss parts) in order, appending to `results`
        with the grad norm as `<role>/grad_norm`; False (step abandoned) at the first NaN/inf."""
        for parts in batches:
            res = updater.update_parts(samples, parts, mask)
            if not res.finite:
                self._abandon(pos, "policy" if role == "actor" else role, res, kept=len(results))
                return False
            results.append(UpdateResult(True, res.grad_norm, {**res.metrics, f"{role}/grad_norm": res.grad_norm}))
        return True

    def _train_step(self, st: _StageState, pos: Position, samples: list[Sample]) -> dict[str, float] | None:
        """Train on one batch; return its metrics, or None if it was abandoned (NaN/inf)."""
        start = time.perf_counter()
        alg, stage = st.algorithm, st.stage
        # A mix stage's expert rows follow the rollouts (`_fetch`): they take no part in the advantages, the
        # reference, the teacher or the rollout correction, only in their own SFT term.
        experts = [s for s in samples if s.expert]
        samples = samples[:len(samples) - len(experts)]
        planner = st.actor.planner
        ref = old = values = None
        if st.reference is not None:
            ref = sharded_forward(lambda mb: token_logprobs(st.reference, mb)[0], samples, self.env, planner)
        teacher = None
        if st.teacher is not None:
            teacher = sharded_forward(lambda mb: token_logprobs(st.teacher, mb)[0], samples, self.env, planner)
        elif alg.advantage_needs.teacher:
            teacher = explorer_teacher_scores(samples, alg.advantage_name)
        # SFT: one update per step; RL: one per `ppo_mini_batch_size` groups, `ppo_epochs` times.
        minis = [list(range(len(samples)))] if alg.is_sft else mini_batches(samples, stage.ppo_mini_batch_size)
        epochs = 1 if alg.is_sft else stage.ppo_epochs
        stats = alg.advantage_needs.forward_outputs
        forward_stats = None
        if stats:
            # One pass gives the advantage pi(y_t) and what else it reads of the policy before the update
            # (sum_v pi_v^2, the entropy), and the loss its old log-probabilities when it recomputes them.
            out = sharded_forward(lambda mb: token_logprobs_and_stats(self.policy, mb, stats), samples, self.env,
                                  planner)
            old = [a[:, 0].copy() for a in out]
            forward_stats = {name: [a[:, i + 1].copy() for a in out] for i, name in enumerate(stats)}
        elif (alg.recompute_old_logprob and len(minis) * epochs > 1) or alg.needs_start_policy:
            old = sharded_forward(lambda mb: token_logprobs(self.policy, mb)[0], samples, self.env, planner)
        if st.critic is not None:
            values = sharded_forward(lambda mb: token_values(st.critic.model, mb), samples, self.env, planner)
        tensors, metrics = build_step_tensors(samples, alg, ref=ref, old=old, values=values,
                                              max_prompt_tokens=stage.max_prompt_tokens,
                                              max_response_tokens=stage.max_response_tokens,
                                              forward_stats=forward_stats, teacher=teacher)
        if alg.advantage_needs.narrows_mask:
            # The samples' own masks, which the micro-batches carry, lose those tokens too.
            samples = _rejected(samples, tensors.mask)
        actor_samples, actor_mask = samples, tensors.mask
        if alg.needs_start_policy and not alg.is_sft:  # a dataset has no behaviour policy to correct for
            staleness_t = torch.tensor([pos.step - s.policy_version for s in samples])
            tensors.rollout_is_weights, keep, corr_metrics = alg.correct_rollouts(tensors.old, tensors.behaviour,
                                                                                 tensors.mask, staleness_t)
            metrics.update(corr_metrics)
            if keep is not None:
                actor_samples, actor_mask = _rejected(samples, keep), keep
        k = pos.step_in_stage
        results: list[UpdateResult] = []
        batches = minis * epochs  # every epoch runs the same mini-batches in the same order
        if st.critic is not None:
            set_lr(st.critic.optimizer, st.critic_schedule(k))
            critic_loss = functools.partial(_critic_loss, alg, tensors)
            if not self._updates(pos, st.critic, "critic", [[LossPart(idx, critic_loss)] for idx in batches],
                                 samples, tensors.mask, results):
                return None
            metrics["critic/lr"] = st.critic_schedule(k)
        if st.critic is None or k >= stage.critic_warmup:
            # As veRL's actor scheduler, the actor's steps count from its first update: the critic's
            # warm-up steps do not use up the actor's learning-rate warm-up.
            lr = st.schedule(k - (stage.critic_warmup if st.critic is not None else 0))
            set_lr(st.actor.optimizer, lr)
            actor_loss = functools.partial(_actor_loss, alg, tensors)
            actor_batches = [[LossPart(idx, actor_loss)] for idx in batches]
            if experts and alg.expert is not None:
                mu = alg.expert.mu(pos.step)
                actor_batches = _with_experts(actor_batches, len(minis), len(actor_samples), len(experts), alg, mu)
                actor_mask = _mask_with_rows(actor_mask, experts)
                actor_samples = actor_samples + experts
                metrics.update({"mix/mu": mu, "mix/expert_rows": float(len(experts))})
            if not self._updates(pos, st.actor, "actor", actor_batches, actor_samples, actor_mask, results):
                return None
            metrics["actor/lr"] = lr
        elapsed = time.perf_counter() - start
        self.nan_consecutive = 0
        metrics.update(_mean_metrics(results))
        tokens = sum(s.length for s in samples + experts)
        staleness = [pos.step - s.policy_version for s in samples]
        metrics.update({
            "perf/time_per_step": elapsed,
            "perf/total_num_tokens": float(tokens),
            "perf/throughput": tokens / elapsed / self.env.world_size,
            "training/stage_index": float(pos.stage_index),
            "trainer/nan_skipped_batches": float(self.nan_batches),
        })
        if not alg.is_sft:
            metrics["staleness/mean"] = sum(staleness) / len(staleness)
            metrics["staleness/max"] = float(max(staleness))
            if self.reader is not None:
                metrics.update(self.reader.metrics())
        return metrics

    def _abandon(self, pos: Position, what: str, res: UpdateResult, kept: int) -> None:
        """Count and log a batch given up for a NaN/inf after `kept` updates of the step were applied;
        stop after too many in a row."""
        self.nan_batches += 1
        self.nan_consecutive += 1
        log.error("step %d: non-finite %s loss or gradient (grad norm %s); batch abandoned: no optimizer step for "
                  "it, nothing published%s (%d abandoned so far)", pos.step + 1, what, res.grad_norm,
                  f"; the {kept} updates this step made before it stay applied" if kept else "", self.nan_batches)
        self._log({"trainer/nan_skipped_batches": float(self.nan_batches), "trainer/nan_updates_kept": float(kept),
                   **{k: v for k, v in res.metrics.items() if k.endswith("loss")}}, pos.step + 1)
        if self.nan_consecutive >= MAX_CONSECUTIVE_NAN_BATCHES:
            raise RuntimeError(f"{self.nan_consecutive} batches in a row had a non-finite loss or gradient; "
                               "the model or the learning rate is broken (see monitor/trainer.jsonl)")

    # ---- outputs -------------------------------------------------------------------------------

    def _publish(self, step: int, stage: TrainerStageSettings) -> None:
        """Publish the policy as version `step` (all ranks gather; rank 0 writes a full snapshot or a delta)."""
        with self._turn():
            self._publish_now(step, stage)

    def _publish_now(self, step: int, stage: TrainerStageSettings) -> None:
        start = time.perf_counter()
        run = self.settings
        if self.env.is_main and self.publisher is None:
            local = (node_local.node_local_dir(node_local.staging_root(run.staging_dir), self.rundir.root)
                     if self.node_local_weights else None)
            self.publisher = Publisher(self.rundir.root, run.model_path, compute_dtype(run.dtype, self.env.device),
                                       run.weight_deltas, run.full_snapshot_interval, run.weight_stripe_count,
                                       self._adapter_config(), local)
        self.publication = publish_model(self.policy, self.env, self.rundir.root, step, self.publisher,
                                         adapter=run.lora is not None)
        self.phases.mark("first_weights")
        if self.env.is_main:
            removed = chain.collect_published(self.rundir.root, stage.keep_published, run.lease_s)
            p = self.publication
            log.info("published policy version %d in %.2f s (%s)%s", step, time.perf_counter() - start,
                     "already published" if p is None else ", ".join(
                         f"{what} {size / 1e6:.1f} MB" for what, size in (("full", p.full_bytes),
                                                                          ("delta", p.delta_bytes)) if size),
                     f"; removed versions {removed}" if removed else "")

    def _turn(self) -> AbstractContextManager[None]:
        """Holding the turns on the GPUs for a block (time-sharing them; else nothing to take)."""
        return self.turns.turn() if self.turns is not None else nullcontext()

    def _away(self) -> AbstractContextManager[None]:
        """Without the turns on the GPUs for a block (time-sharing them; else nothing to give up)."""
        return self.turns.away() if self.turns is not None else nullcontext()

    def _holdings(self) -> tuple[list[torch.nn.Module], list[torch.optim.Optimizer]]:
        """The models and optimizers the trainer keeps on its GPUs now (for time-sharing them)."""
        st = self.current
        models = [self.policy]
        optimizers = []
        if st is not None:
            models += [st.reference, st.teacher, *([st.critic.model] if st.critic is not None else [])]
            optimizers = [st.actor.optimizer, *([st.critic.optimizer] if st.critic is not None else [])]
        unique = {id(m): m for m in models if isinstance(m, torch.nn.Module)}
        return list(unique.values()), optimizers

    def _publish_due(self, st: _StageState, pos: Position) -> bool:
        """After step `pos.step`: publish now if the style says so (every rank calls it); True if published."""
        if not st.is_rl:
            return False
        if st.stage.sync_style == "explorer_driven":
            return self._serve_requests(st, pos)
        if pos.step_in_stage % st.stage.sync_interval:
            return False
        self._publish(pos.step, st.stage)
        return True

    def _serve_requests(self, st: _StageState, pos: Position) -> bool:
        """`sync_style: explorer_driven`: if an explorer asked for weights since the last answer,
        publish the policy unless it is published already (nothing trained since), then answer every
        request with the newest version. Every rank calls it (a publication gathers the weights);
        True if it published."""
        def asked() -> bool | None:
            assert self.requests is not None
            if not self.requests.pending():
                return None
            return published.read_latest(self.rundir.root) != pos.step

        publish = self.env.on_main(asked)
        if publish is None:
            return False
        if publish:
            self._publish(pos.step, st.stage)
        if self.requests is not None:
            latest = published.read_latest(self.rundir.root)
            self.requests.answer(pos.step if latest is None else latest)
        return publish

    def _save(self, st: _StageState, pos: Position, stage_finished: bool) -> None:
        """Write checkpoint `pos.step` (all ranks), then let the store and old checkpoints be collected.
        Nothing to do if that very checkpoint was written already (save_interval, then a stop signal
        or the stage's end; or resumed from it): a second write would only spend the time Slurm's
        warning leaves."""
        if self.last_saved == (pos.step, stage_finished):
            return
        from rfthpc.store import collect_garbage

        run = self.settings
        parts = [ckpt.Part("actor", self.policy, st.actor.optimizer, run.model_path, self._adapter_config())]
        if st.critic is not None:
            parts.append(ckpt.Part("critic", st.critic.model, st.critic.optimizer, run.critic_model_path))
        meta = CheckpointMeta(
            step=pos.step, stage=st.stage.name, stage_index=pos.stage_index, stage_start_step=pos.stage_start_step,
            stage_finished=stage_finished,
            dtype=str(compute_dtype(run.dtype, self.env.device)).removeprefix("torch."),
            reader=self.reader.state() if self.reader is not None else None,
            sft_data=st.sft.state_dict() if st.sft is not None else None,
            kl_controller=st.algorithm.kl_controller.value if st.algorithm.kl_controller is not None else None,
            nan_skipped_batches=self.nan_batches, published_version=published.read_latest(self.rundir.root),
        )
        hf = st.stage.save_hf_checkpoint
        last = stage_finished and pos.stage_index == len(self.stages) - 1
        save_hf = hf == "always" or (hf == "last" and last)
        ckpt.save_checkpoint(self.rundir.root, self.env, parts, meta, save_hf=save_hf,
                             hf_dtype=compute_dtype(run.dtype, self.env.device))
        self.last_saved = (pos.step, stage_finished)
        if self.env.is_main:
            self.reader.mark_checkpointed(meta.reader)
            collect_garbage(self.rundir.root, keep_chunks=run.keep_consumed_chunks)
            protect = {pos.stage_start_step} if st.reference is not None else set()
            ckpt.remove_old_checkpoints(self.rundir.root, st.stage.max_checkpoints_to_keep, protect)

    def _adapter_config(self) -> dict[str, Any] | None:
        """With LoRA, the adapter_config.json of the policy's adapter (on the base model); else None."""
        return adapter_config(self.policy, self.settings.model_path) if self.settings.lora is not None else None

    def _write_trainer_meta(self, pos: Position, done: bool = False) -> None:
        if not self.env.is_main:
            return
        self.meta = write_trainer_meta(self.rundir, TrainerMeta(
            step=pos.step, stage=self.stages[pos.stage_index].name, stage_index=pos.stage_index,
            stage_start_step=pos.stage_start_step, published_version=published.read_latest(self.rundir.root),
            done=done, state="done" if done else "training"))

    def _report_end(self, code: int) -> None:
        """Say in `trainer_meta/` how this process ended when it did not finish the run."""
        if self.meta is None or self.meta.done or code == EXIT_DONE:
            return
        self.meta = write_trainer_meta(self.rundir, self.meta.with_state(
            "stopped" if code == EXIT_PREEMPTED else "failed"))

    def _log(self, metrics: dict[str, float], step: int) -> None:
        if self.monitor is not None:
            self.monitor.log(metrics, step)


def _timed(fn: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    """Seconds `fn(*args, **kwargs)` took."""
    began = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - began


def _plan(samples: list[Sample], indices: list[int], *, world_size: int, token_budget: int | None,
          micro_batch_size: int, share_prompts: bool, padding_free: bool):
    return plan_micro_batches(samples, indices, world_size, token_budget=token_budget,
                              micro_batch_size=micro_batch_size, share_prompts=share_prompts,
                              padding_free=padding_free)


def _rejected(samples: list[Sample], keep: torch.Tensor) -> list[Sample]:
    """The samples with the tokens outside `keep` (rollout rejection's, or responses the advantage
    leaves out) removed from their loss masks: the micro-batches then carry the reduced masks, and the
    loss's denominators (and the weighting of micro-batches, update.py) count only the tokens kept."""
    kept = keep.numpy()
    return [dataclasses.replace(s, loss_mask=s.loss_mask & kept[i, :len(s.loss_mask)]) for i, s in enumerate(samples)]


def _with_experts(batches: list[list[LossPart]], n_minis: int, first: int, n_experts: int, alg: Algorithm,
                  mu: float) -> list[list[LossPart]]:
    """A mix step's updates: each mini-batch's rollouts weighted 1 - mu, beside an even share of the expert rows
    (samples `first` .. `first + n_experts - 1`) weighted mu, the same share in every epoch."""
    shares = np.array_split(np.arange(first, first + n_experts), n_minis)
    expert_loss = functools.partial(_expert_loss, alg)
    return [[dataclasses.replace(parts[0], scale=1.0 - mu),
             LossPart(shares[j % n_minis].tolist(), expert_loss, scale=mu, weight=alg.expert_weight)]
            for j, parts in enumerate(batches)]


def _mask_with_rows(mask: torch.Tensor, samples: list[Sample]) -> torch.Tensor:
    """`mask` (B, R) with the loss masks of `samples` appended as rows, both padded to the wider."""
    width = max(mask.shape[1], *(len(s.loss_mask) for s in samples))
    out = torch.zeros(mask.shape[0] + len(samples), width, dtype=mask.dtype)
    out[:mask.shape[0], :mask.shape[1]] = mask
    for i, s in enumerate(samples):
        out[mask.shape[0] + i, :len(s.loss_mask)] = torch.as_tensor(s.loss_mask, dtype=mask.dtype)
    return out


def _expert_rows(samples: list[Sample], temperature: float) -> list[Sample]:
    """A mix stage's expert rows: marked, and scored at the rollouts' temperature (as Trinity-RFT's actor scores
    its whole batch)."""
    return [dataclasses.replace(s, expert=True, temperature=temperature) for s in samples]


def _expert_loss(alg: Algorithm, model: torch.nn.Module, mb, idx: list[int]):
    return alg.expert_loss(token_logprobs(model, mb)[0], mb.response_mask)


def _actor_loss(alg: Algorithm, t: StepTensors, model: torch.nn.Module, mb, idx: list[int]):
    lp, entropy = token_logprobs(model, mb, with_entropy=True, entropy_grad=alg.entropy_needs_grad)
    width, dev = lp.shape[1], lp.device
    if alg.is_preference:
        return alg.actor_loss(lp, entropy, mb.response_mask, None, None, None, t.rows("ref", idx, width, dev),
                              pair_sign=t.rows("pair_sign", idx, width, dev),
                              partner_log_ratio=t.rows("partner_log_ratio", idx, width, dev))
    if alg.is_sft:
        return alg.actor_loss(lp, entropy, mb.response_mask, None, None, None, None)
    if not alg.recompute_old_logprob:
        old = t.rows("behaviour", idx, width, dev)
    elif t.old is not None:
        old = t.rows("old", idx, width, dev)
    else:
        # One update per step: the policy before it is the policy now.
        old = lp.detach()
    return alg.actor_loss(lp, entropy, mb.response_mask, old, t.rows("advantages", idx, width, dev),
                          t.rewards[idx].to(dev), t.rows("ref", idx, width, dev),
                          behaviour_log_prob=t.rows("behaviour", idx, width, dev),
                          rollout_is_weights=t.rows("rollout_is_weights", idx, width, dev))


def _critic_loss(alg: Algorithm, t: StepTensors, model: torch.nn.Module, mb, idx: list[int]):
    from rfthpc.algorithms import value_loss

    vpreds = token_values(model, mb)
    width, dev = vpreds.shape[1], vpreds.device
    with alg.loss_scale():
        return value_loss(vpreds, t.rows("values", idx, width, dev), t.rows("returns", idx, width, dev),
                          mb.response_mask, loss_agg_mode=alg.loss_agg_mode)


def _mean_metrics(results: list[UpdateResult]) -> dict[str, float]:
    sums: dict[str, list[float]] = defaultdict(list)
    for r in results:
        for k, v in r.metrics.items():
            sums[k].append(v)
    return {k: sum(v) / len(v) for k, v in sums.items()}


def run_trainer(run_dir: Path, node_local_weights: bool = False, time_share_gpus: bool = False) -> int:
    """The trainer process: join the process group, train, leave; return the exit code
    (`node_local_weights`, `time_share_gpus`: see `Trainer`)."""
    imported = time.time()
    env = init_distributed()
    phases = PhaseLog(run_dir, "trainer", enabled=env.is_main)
    phases.mark("imports", imported)
    code: int | None = None
    try:
        code = Trainer(run_dir, env, phases, node_local_weights, time_share_gpus).run()
        return code
    finally:
        env.close(synchronised=code is not None)
        phases.mark("exit")
