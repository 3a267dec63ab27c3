"""Per-role settings: what a role reads of the run's config, resolved once, frozen, with nothing left
to fill in.

A `Config` serves every layer from the raw YAML to the finalized stage, so its fields may be None
("derive later") and any holder may change it. Roles read these instead: built from the finalized
stages by the functions below, every value is the one the config layer decided (a role that
re-derived one could disagree with another role), and a role cannot change them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from rfthpc.algorithms.mix_settings import expert_rows
from rfthpc.algorithms.presets import needs_greedy_baseline, trains_on_dataset
from rfthpc.algorithms.registry import ADVANTAGE_FNS
from rfthpc.algorithms.replay import ReplayPolicy
from rfthpc.algorithms.rollout_settings import RolloutCorrection
from rfthpc.algorithms.shaping import GroupFilter, OverlongPenalty, group_filter, overlong_penalty
from rfthpc.config.algorithm import AlgorithmConfig, OptimizerConfig
from rfthpc.config.buffer import ExperienceBufferConfig, TasksetConfig
from rfthpc.config.derive import Stage
from rfthpc.config.expert import mix_args, rollout_groups_per_step
from rfthpc.config.explorer import InferenceModelConfig
from rfthpc.config.lora import LoRAConfig, LoRASettings
from rfthpc.config.monitor import MonitorConfig
from rfthpc.config.schema import Config, explores, trains
from rfthpc.errors import ConfigError


def _frozen(args: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(args))


class UnresolvedError(ConfigError):
    """A value finalizing the config sets is unset: the config was not finalized, or a problem found
    while finalizing it (an unknown algorithm_type, whose preset names no functions) left it unset."""


def _required(value: Any, key: str) -> Any:
    """`value`, which finalizing the config has set; UnresolvedError if it is None."""
    if value is None:
        raise UnresolvedError(f"{key}: not set after the config was resolved; set it in the config")
    return value


@dataclass(frozen=True)
class OptimizerSettings:
    """AdamW and its learning-rate schedule (`algorithm.optimizer`)."""

    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    lr_warmup_steps: int
    lr_warmup_steps_ratio: float
    lr_scheduler_type: str
    min_lr_ratio: float

    @classmethod
    def of(cls, opt: OptimizerConfig) -> OptimizerSettings:
        if len(opt.betas) != 2:
            raise ConfigError(f"algorithm.optimizer.betas: {opt.betas} must hold two numbers, e.g. [0.9, 0.999]")
        return cls(float(opt.lr), (float(opt.betas[0]), float(opt.betas[1])), float(opt.eps),
                   float(opt.weight_decay), int(opt.lr_warmup_steps), float(opt.lr_warmup_steps_ratio),
                   opt.lr_scheduler_type, float(opt.min_lr_ratio))


@dataclass(frozen=True)
class AlgorithmSettings:
    """The algorithm of a stage, every function named (the preset applied) with its arguments."""

    algorithm_type: str
    repeat_times: int
    advantage_fn: str | None
    """None only for SFT and DPO."""
    advantage_fn_args: Mapping[str, Any]
    policy_loss_fn: str
    policy_loss_fn_args: Mapping[str, Any]
    kl_penalty_fn: str
    kl_penalty_fn_args: Mapping[str, Any]
    kl_loss_fn: str
    kl_loss_fn_args: Mapping[str, Any]
    entropy_loss_fn: str
    entropy_loss_fn_args: Mapping[str, Any]
    loss_agg_mode: str
    optimizer: OptimizerSettings
    loss_scale_factor: float | None = None
    """The -norm modes' constant length (default model.max_response_tokens); None otherwise."""
    rollout_correction: RolloutCorrection = field(default_factory=RolloutCorrection)
    """`algorithm.rollout_correction`, parsed (off for SFT and DPO, which have no behaviour policy)."""

    @classmethod
    def of(cls, alg: AlgorithmConfig) -> AlgorithmSettings:
        policy_loss = _required(alg.policy_loss_fn, "algorithm.policy_loss_fn")
        return cls(
            algorithm_type=alg.algorithm_type,
            repeat_times=int(_required(alg.repeat_times, "algorithm.repeat_times")),
            advantage_fn=alg.advantage_fn or None,
            advantage_fn_args=_frozen(alg.advantage_fn_args),
            policy_loss_fn=policy_loss,
            policy_loss_fn_args=_frozen(alg.policy_loss_fn_args),
            kl_penalty_fn=_required(alg.kl_penalty_fn, "algorithm.kl_penalty_fn"),
            kl_penalty_fn_args=_frozen(alg.kl_penalty_fn_args),
            kl_loss_fn=_required(alg.kl_loss_fn, "algorithm.kl_loss_fn"),
            kl_loss_fn_args=_frozen(alg.kl_loss_fn_args),
            entropy_loss_fn=_required(alg.entropy_loss_fn, "algorithm.entropy_loss_fn"),
            entropy_loss_fn_args=_frozen(alg.entropy_loss_fn_args),
            loss_agg_mode=_required(alg.loss_agg_mode, "algorithm.loss_agg_mode"),
            optimizer=OptimizerSettings.of(alg.optimizer),
            loss_scale_factor=alg.loss_scale_factor,
            rollout_correction=RolloutCorrection() if trains_on_dataset(alg.algorithm_type)
            else RolloutCorrection.of(alg.rollout_correction),
        )


@dataclass(frozen=True)
class TrainerStageSettings:
    """What the trainer reads of one stage."""

    name: str
    trains: bool
    """Whether the trainer has work in the stage (its mode is not explore)."""
    algorithm: AlgorithmSettings
    chat_template: str | None
    """The policy's one chat template (None: the tokenizer's own); the explorers roll out with it."""
    enable_thinking: bool | None
    max_prompt_tokens: int | None
    max_response_tokens: int | None
    sampling_temperature: float
    """The temperature the explorers sample at (the tasksets' if they agree, else `model.temperature`):
    the trainer's log-probabilities are taken at it."""
    train_batch_size: int
    """Experiences per step (`buffer.train_batch_size`)."""
    groups_per_step: int
    """Groups per step: `train_batch_size` / `repeat_times`."""
    total_steps: int | None
    """Steps of the stage; None: until the data runs out."""
    total_epochs: int
    ppo_mini_batch_size: int
    ppo_epochs: int
    ppo_micro_batch_size_per_gpu: int
    share_prompt_forward: bool
    use_remove_padding: bool
    token_budget: int | None
    """Tokens per micro-batch per GPU when batches are sized by tokens (`use_dynamic_bsz`), else None."""
    grad_clip: float
    critic_lr: float
    critic_lr_warmup_steps_ratio: float
    critic_warmup: int
    save_interval: int
    save_hf_checkpoint: str
    max_checkpoints_to_keep: int | None
    sync_style: str
    """`synchronizer.sync_style`: explorer_driven publishes when explorers ask, the others every `sync_interval` steps."""
    sync_interval: int
    max_staleness: int
    keep_published: int
    read_timeout_s: float
    """`buffer.trainer_input.experience_buffer.max_read_timeout`."""
    chunk_delay_s: float
    """`buffer.trainer_input.experience_buffer.max_chunk_delay`."""
    sft_data: ExperienceBufferConfig
    """The SFT or DPO dataset (SFT and DPO stages); a copy the trainer owns."""
    claim_sets: tuple[str, ...]
    """The `TaskClaims` names of the stage's tasksets, as its explorers name them."""
    replay: ReplayPolicy | None = None
    """How the store is read with experience replay; None: each group once, in commit order."""
    expert_data: ExperienceBufferConfig | None = None
    """A mix stage's expert SFT dataset (`algorithm.sample_strategy: mix`); None: no expert rows."""
    expert_rows: int = 0
    """Expert rows per step of a mix stage, beside `groups_per_step` groups of rollouts."""


@dataclass(frozen=True)
class TrainerSettings:
    """What the trainer reads of the run: settings of the whole run, then one entry per stage."""

    model_path: Path
    critic_model_path: Path
    dtype: str
    gradient_checkpointing: bool
    cpu_offload: bool
    continue_from_checkpoint: bool
    share_group: str | None
    lease_s: float
    poll_interval_s: float
    keep_consumed_chunks: bool
    weight_deltas: Literal["auto", "on", "off"]
    full_snapshot_interval: int
    weight_stripe_count: int
    staging_dir: str
    """`filesystem.staging_dir`: where node-local copies of published versions go (rfthpc.weights.node_local)."""
    project: str
    name: str
    monitor: MonitorConfig
    stages: tuple[TrainerStageSettings, ...]
    lora: LoRASettings | None = None
    """The adapter trained instead of the model's weights (`model.lora`); None: every weight."""
    sequence_parallel_size: int = 1
    """Ranks that split each sequence (`trainer.ulysses_sequence_parallel_size`); 1: none."""
    teacher_model_path: Path | None = None
    """`model.teacher_model_path`: the frozen teacher of on-policy distillation; None: none."""


def _sampling_temperature(cfg: Config) -> float:
    temps = {ts.rollout_args.temperature for ts in cfg.buffer.explorer_input.tasksets}
    t = temps.pop() if len(temps) == 1 else cfg.model.temperature
    return float(t) if t and t > 0 and math.isfinite(t) else 1.0


def claims_name(taskset: str, stage: str | None = None) -> str:
    """The claim set of `taskset`: its name, or `<stage>.<taskset>` when several stages explore (each
    stage then has its own claims on a taskset they share)."""
    return taskset if stage is None else f"{stage}.{taskset}"


def stage_claim_sets(stages: list[Stage]) -> list[tuple[str, ...]]:
    """Per stage, the claim sets of its training tasksets: `<taskset>`, or `<stage>.<taskset>` when
    several stages explore (each has its own claims then). Explorers and trainer use these names."""
    several = sum(explores(s.config.mode) for s in stages) > 1
    return [tuple(claims_name(ts.name, s.name if several else None) for ts in s.config.buffer.explorer_input.tasksets)
            for s in stages]


def _trainer_stage(stage: Stage, claim_sets: tuple[str, ...]) -> TrainerStageSettings:
    cfg = stage.config
    alg, t, b, m = cfg.algorithm, cfg.trainer, cfg.buffer, cfg.model
    algorithm = AlgorithmSettings.of(alg)
    train_batch = int(_required(b.train_batch_size, "buffer.train_batch_size"))
    eb = b.trainer_input.experience_buffer
    return TrainerStageSettings(
        name=stage.name, trains=trains(cfg.mode), algorithm=algorithm,
        chat_template=m.custom_chat_template, enable_thinking=m.enable_thinking, max_prompt_tokens=m.max_prompt_tokens,
        max_response_tokens=m.max_response_tokens, sampling_temperature=_sampling_temperature(cfg),
        train_batch_size=train_batch, groups_per_step=rollout_groups_per_step(cfg),
        total_steps=b.total_steps, total_epochs=b.total_epochs,
        ppo_mini_batch_size=int(_required(t.ppo_mini_batch_size, "trainer.ppo_mini_batch_size")),
        ppo_epochs=t.ppo_epochs, ppo_micro_batch_size_per_gpu=t.ppo_micro_batch_size_per_gpu,
        share_prompt_forward=t.share_prompt_forward, use_remove_padding=t.use_remove_padding,
        token_budget=t.max_token_len_per_gpu if t.use_dynamic_bsz else None,
        grad_clip=t.grad_clip, critic_lr=t.critic_lr, critic_lr_warmup_steps_ratio=t.critic_lr_warmup_steps_ratio,
        critic_warmup=t.critic_warmup, save_interval=t.save_interval, save_hf_checkpoint=t.save_hf_checkpoint,
        max_checkpoints_to_keep=t.max_checkpoints_to_keep, sync_style=cfg.synchronizer.sync_style,
        sync_interval=cfg.synchronizer.sync_interval,
        max_staleness=int(_required(cfg.synchronizer.max_staleness, "synchronizer.max_staleness")),
        keep_published=cfg.synchronizer.keep_published, read_timeout_s=eb.max_read_timeout,
        chunk_delay_s=eb.max_chunk_delay, sft_data=copy.deepcopy(eb), claim_sets=claim_sets,
        replay=replay_policy(cfg), **_expert(cfg, train_batch),
    )


def _expert(cfg: Config, train_batch: int) -> dict[str, Any]:
    """A mix stage's `expert_data` and `expert_rows` (none for any other stage)."""
    if cfg.algorithm.sample_strategy != "mix":
        return {}
    args = mix_args(cfg)
    return {"expert_data": copy.deepcopy(cfg.buffer.trainer_input.auxiliary_buffers[args["sft_dataset_name"]]),
            "expert_rows": expert_rows(train_batch, args["expert_data_ratio"])}


def replay_policy(cfg: Config) -> ReplayPolicy | None:
    """The replay policy of a (finalized) stage; None without replay, and for an sft or dpo stage, which reads
    a dataset (as Trinity-RFT, whose replay buffer is a queue's). Raises ConfigError for bad values."""
    eb = cfg.buffer.trainer_input.experience_buffer
    rb = eb.replay_buffer
    if not rb.enable or trains_on_dataset(cfg.algorithm.algorithm_type):
        return None
    return ReplayPolicy(capacity=eb.capacity, reuse_cooldown_s=rb.reuse_cooldown_time, priority_fn=rb.priority_fn,
                        priority_fn_args=_frozen(rb.priority_fn_args))


def trainer_settings(stages: list[Stage], check_paths: bool = True) -> TrainerSettings:
    """The trainer's settings of a run with these (finalized) stages. The model and the run-wide
    values come from the first stage the trainer runs (they cannot change between stages). Without
    `check_paths` (a config checked for another machine) a LoRA adapter to start from is not read."""
    trained = [s for s in stages if trains(s.config.mode)] or stages[:1]
    first = trained[0].config
    for stage in trained[1:]:
        for key in ("model_path", "critic_model_path", "teacher_model_path", "dtype", "lora"):
            if getattr(stage.config.model, key) != getattr(first.model, key):
                raise ConfigError(
                    f"stage {stage.name!r}: model.{key} {getattr(stage.config.model, key)!r} differs from stage "
                    f"{trained[0].name!r}'s {getattr(first.model, key)!r}; one policy is trained through the "
                    f"stages: set model.{key} for the whole run, not per stage"
                )
        size = stage.config.trainer.ulysses_sequence_parallel_size
        if size != first.trainer.ulysses_sequence_parallel_size:
            raise ConfigError(
                f"stage {stage.name!r}: trainer.ulysses_sequence_parallel_size {size} differs from stage "
                f"{trained[0].name!r}'s {first.trainer.ulysses_sequence_parallel_size}; the trainer's ranks are grouped "
                "once for the run: set it for the whole run, not per stage"
            )
    m, t, fs = first.model, first.trainer, first.filesystem
    if m.teacher_model_path and not any(ADVANTAGE_FNS.needs(s.config.algorithm.advantage_fn).teacher
                                        for s in trained if s.config.algorithm.advantage_fn):
        raise ConfigError(f"model.teacher_model_path: {m.teacher_model_path!r} is read only by an advantage that scores "
                          "with a teacher, and no stage has one; remove it, or set algorithm_type: on_policy_distill")
    return TrainerSettings(
        model_path=Path(_required(m.model_path, "model.model_path")).expanduser(),
        critic_model_path=Path(_required(m.critic_model_path, "model.critic_model_path")).expanduser(),
        dtype=m.dtype, gradient_checkpointing=t.enable_gradient_checkpointing,
        cpu_offload=t.param_offload or t.optimizer_offload,
        continue_from_checkpoint=first.continue_from_checkpoint, share_group=fs.share_group, lease_s=fs.lease_s,
        poll_interval_s=fs.poll_interval_s, keep_consumed_chunks=fs.keep_consumed_chunks,
        weight_deltas=first.synchronizer.weight_deltas,
        full_snapshot_interval=first.synchronizer.full_snapshot_interval, weight_stripe_count=fs.weight_stripe_count,
        staging_dir=fs.staging_dir, project=first.project, name=first.name, monitor=copy.deepcopy(first.monitor),
        stages=tuple(_trainer_stage(s, c) for s, c in zip(stages, stage_claim_sets(stages), strict=True)),
        lora=lora_settings(m.lora, check_paths), sequence_parallel_size=t.ulysses_sequence_parallel_size,
        teacher_model_path=Path(m.teacher_model_path).expanduser() if m.teacher_model_path else None,
    )


def lora_settings(cfg: LoRAConfig | None, read_adapter: bool = True) -> LoRASettings | None:
    """`model.lora` resolved (the adapter at `path` read, if `read_adapter`), or None without one."""
    if cfg is None:
        return None
    try:
        return LoRASettings.of(cfg, read_adapter)
    except ValueError as e:
        raise ConfigError(f"model.lora.path: {e}") from None


POLICY_ENGINE = "policy"
"""The name of the rollout engine among an explorer's engines (auxiliary engines go by their `name`)."""


@dataclass(frozen=True)
class InferenceModelSettings:
    """One model an explorer serves: the rollout model (`POLICY_ENGINE`) or an auxiliary one."""

    name: str
    engine_type: str
    model_path: str
    dtype: str
    max_model_len: int | None
    seed: int
    """Sampling seed of array task 0; task `rank` samples with `seed + rank`."""
    tensor_parallel_size: int
    gpu_memory_utilization: float
    enforce_eager: bool
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    cpu_kvcache_space_gb: int
    chat_template: str | None
    """None: the tokenizer's own."""
    enable_thinking: bool | None
    max_prompt_tokens: int | None
    max_response_tokens: int | None
    placement: str = "per_explorer"
    """Auxiliary models: shared (a server job serves every explorer) or per_explorer (an engine in each
    explorer process); the rollout model is always per_explorer."""
    engine_num: int = 1
    """Shared auxiliary models: engines of the server (tasks of its job array)."""
    server_timeout: float = 1800.0
    """Shared auxiliary models: seconds a request keeps being retried while no engine of the server answers."""
    lora: LoRASettings | None = None
    """The rollout model: the adapter the trainer trains (`model.lora`), which the engine applies to
    `model_path`; None: published weights are whole models."""
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Further vLLM engine arguments (`InferenceModelConfig.engine_kwargs`), checked at validation."""

    @property
    def shared(self) -> bool:
        """True for an auxiliary model served to every explorer by a server job of its own."""
        return self.placement == "shared"


@dataclass(frozen=True)
class ExplorerStageSettings:
    """What an explorer reads of one stage."""

    name: str
    index: int
    explores: bool
    """Whether explorers have work in the stage (its mode is both or explore)."""
    tasksets: tuple[TasksetConfig, ...]
    """Training tasksets, finalized (copies the explorer owns)."""
    claim_sets: tuple[str, ...]
    """The `TaskClaims` name of each training taskset (the trainer names them alike)."""
    eval_tasksets: tuple[TasksetConfig, ...]
    batch_size: int
    """Tasks per trainer step (`buffer.batch_size`)."""
    max_tasks: int | None
    """Tasks the stage's steps consume (`total_steps` x `batch_size`); None: every task of its epochs."""
    claim_size: int
    claim_batches: int
    """Batches claimed in one transaction (`explorer.claim_batches`, resolved)."""
    claim_shards: int
    """Shards of a claim set this explorer creates (`explorer.claim_shards`, resolved)."""
    """Tasks one explorer claims at a time: its share of a batch (`batch_size` / array size)."""
    max_staleness: int
    sync_timeout: float
    sync_style: str
    """`synchronizer.sync_style`: when this explorer loads new weights (`rfthpc.explorer.sync`)."""
    sync_interval: int
    sync_offset: int
    eval_interval: int
    eval_on_startup: bool
    filter_groups: GroupFilter | None = None
    """Dynamic sampling (`algorithm.filter_groups`): groups without contrast are not committed."""
    overlong: OverlongPenalty | None = None
    """The soft overlong penalty added to each reward (`algorithm.overlong_buffer`)."""
    greedy_baseline: bool = False
    """The advantage function compares with a greedy response's reward (ReMax): generate and store it."""


@dataclass(frozen=True)
class ExplorerSettings:
    """What an explorer reads of the run: its engines and run-wide values, then one entry per stage."""

    rollout_model: InferenceModelSettings
    auxiliary_models: tuple[InferenceModelSettings, ...]
    teacher_model: str | None
    """`explorer.teacher_model`: the auxiliary model that scores each training sample for distillation (None: none)."""
    min_response_tokens: int
    enable_prompt_truncation: bool
    runner_per_model: int
    max_repeat_times_per_runner: int | None
    """Most samples one request to the rollout engine asks for (None: no limit)."""
    env_vars: Mapping[str, str]
    """`explorer.env_vars`: set in the explorer's process environment before its engines start."""
    max_timeout: float
    max_retry_times: int
    max_retry_interval: float
    weights_poll_interval: float
    groups_per_chunk: int
    max_chunk_delay: float
    lease_s: float
    poll_interval_s: float
    lock_type: str
    share_group: str | None
    staging_dir: str
    project: str
    name: str
    monitor: MonitorConfig
    stages: tuple[ExplorerStageSettings, ...]


def _inference_model(key: str, name: str, model: InferenceModelConfig) -> InferenceModelSettings:
    return InferenceModelSettings(
        name=name, engine_type=model.engine_type, model_path=str(_required(model.model_path, f"{key}.model_path")),
        dtype=model.dtype, max_model_len=model.max_model_len, seed=model.seed,
        tensor_parallel_size=model.tensor_parallel_size, gpu_memory_utilization=model.gpu_memory_utilization,
        enforce_eager=model.enforce_eager, enable_prefix_caching=model.enable_prefix_caching,
        enable_chunked_prefill=model.enable_chunked_prefill, cpu_kvcache_space_gb=model.cpu_kvcache_space_gb,
        chat_template=model.chat_template, enable_thinking=model.enable_thinking,
        max_prompt_tokens=model.max_prompt_tokens, max_response_tokens=model.max_response_tokens,
        placement=model.placement if key != "explorer.rollout_model" else "per_explorer",
        engine_num=model.engine_num, server_timeout=model.server_timeout, engine_kwargs=dict(model.engine_kwargs),
    )


def _auxiliary_models(cfg: Config) -> tuple[InferenceModelSettings, ...]:
    out: dict[str, InferenceModelSettings] = {}
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        key = f"explorer.auxiliary_models[{i}]"
        if not aux.name or aux.name == POLICY_ENGINE or aux.name in out:
            raise ConfigError(
                f"{key}.name={aux.name!r}: give each auxiliary model a unique name other than {POLICY_ENGINE!r}; "
                "workflows address it by that name"
            )
        if not aux.model_path:
            raise ConfigError(f"{key}.model_path: missing; give a local model directory")
        out[aux.name] = _inference_model(key, aux.name, aux)
    return tuple(out.values())


def _teacher_model(explored: list[Stage]) -> str | None:
    """`explorer.teacher_model` of the stages that explore: one auxiliary model's name, read by an advantage
    that scores with a teacher (ConfigError otherwise)."""
    first = explored[0].config
    name = first.explorer.teacher_model
    for stage in explored[1:]:
        if stage.config.explorer.teacher_model != name:
            raise ConfigError(f"stage {stage.name!r}: explorer.teacher_model differs from stage "
                              f"{explored[0].name!r}'s; the explorers start the teacher's engines once: set it for "
                              "the whole run")
    if name is None:
        return None
    names = [aux.name for aux in first.explorer.auxiliary_models]
    if name not in names:
        raise ConfigError(f"explorer.teacher_model: {name!r} is not the name of an auxiliary model "
                          f"(explorer.auxiliary_models: {', '.join(map(repr, names)) or 'none'}); add the teacher "
                          "there and name it")
    if not any(ADVANTAGE_FNS.needs(s.config.algorithm.advantage_fn).teacher
               for s in explored if s.config.algorithm.advantage_fn):
        raise ConfigError(f"explorer.teacher_model: {name!r} is read only by an advantage that scores with a teacher, "
                          "and no stage has one; remove it, or set algorithm_type: on_policy_distill")
    if first.model.teacher_model_path:
        raise ConfigError("explorer.teacher_model and model.teacher_model_path: the teacher is either served beside "
                          "the explorers or loaded in the trainer; keep one")
    return name


def claim_batches(configured: int, array_size: int) -> int:
    """`explorer.claim_batches` resolved: 0 is 1 for arrays of up to 8 explorers, one more per 8, at most 8."""
    return configured or min(8, max(1, math.ceil(array_size / 8)))


def claim_shards(configured: int, array_size: int) -> int:
    """`explorer.claim_shards` resolved: 0 is one shard per 16 explorers of the array."""
    return configured or max(1, math.ceil(array_size / 16))


def _explorer_stage(index: int, stage: Stage, claim_sets: tuple[str, ...]) -> ExplorerStageSettings:
    cfg = stage.config
    b, ex, sync = cfg.buffer, cfg.explorer, cfg.synchronizer
    array_size = max(1, int(_required(cfg.slurm.explorer.array_size, "slurm.explorer.array_size")))
    return ExplorerStageSettings(
        name=stage.name, index=index, explores=explores(cfg.mode),
        tasksets=tuple(copy.deepcopy(b.explorer_input.tasksets)), claim_sets=claim_sets,
        eval_tasksets=tuple(copy.deepcopy(b.explorer_input.eval_tasksets)), batch_size=b.batch_size,
        max_tasks=None if b.total_steps is None else b.total_steps * b.batch_size,
        claim_size=max(1, math.ceil(b.batch_size / array_size)),
        claim_batches=claim_batches(ex.claim_batches, array_size),
        claim_shards=claim_shards(ex.claim_shards, array_size),
        max_staleness=int(_required(sync.max_staleness, "synchronizer.max_staleness")),
        sync_timeout=sync.sync_timeout, sync_style=sync.sync_style, sync_interval=sync.sync_interval,
        sync_offset=sync.sync_offset, eval_interval=ex.eval_interval, eval_on_startup=ex.eval_on_startup,
        filter_groups=group_filter(cfg.algorithm.filter_groups),
        overlong=overlong_penalty(cfg.algorithm.overlong_buffer, cfg.model.max_response_tokens),
        greedy_baseline=needs_greedy_baseline(cfg.algorithm.advantage_fn),
    )


def explorer_settings(stages: list[Stage], check_paths: bool = True) -> ExplorerSettings:
    """An explorer's settings of a run with these (finalized) stages. Engines and run-wide values come
    from the first stage that explores: the engines start once and serve every stage. `check_paths`
    as for `trainer_settings`."""
    explored = [s for s in stages if explores(s.config.mode)] or stages[:1]
    first = explored[0].config
    for stage in explored[1:]:
        if stage.config.explorer.env_vars != first.explorer.env_vars:
            raise ConfigError(
                f"stage {stage.name!r}: explorer.env_vars differ from those of stage {explored[0].name!r}; an explorer "
                "process sets them once, before its engines start: set explorer.env_vars for the whole run"
            )
    ex, fs, buf = first.explorer, first.filesystem, first.buffer.trainer_input.experience_buffer
    return ExplorerSettings(
        # The policy's token limits are the model's (validation refuses rollout_model values that differ).
        rollout_model=replace(_inference_model("explorer.rollout_model", POLICY_ENGINE, ex.rollout_model),
                              max_prompt_tokens=first.model.max_prompt_tokens,
                              max_response_tokens=first.model.max_response_tokens,
                              lora=lora_settings(first.model.lora, check_paths)),
        auxiliary_models=_auxiliary_models(first), teacher_model=_teacher_model(explored),
        min_response_tokens=first.model.min_response_tokens,
        enable_prompt_truncation=first.model.enable_prompt_truncation, runner_per_model=ex.runner_per_model,
        max_repeat_times_per_runner=ex.max_repeat_times_per_runner, env_vars=_frozen(ex.env_vars),
        max_timeout=ex.max_timeout, max_retry_times=ex.max_retry_times, max_retry_interval=ex.max_retry_interval,
        weights_poll_interval=ex.weights_poll_interval, groups_per_chunk=buf.groups_per_chunk,
        max_chunk_delay=buf.max_chunk_delay, lease_s=fs.lease_s, poll_interval_s=fs.poll_interval_s,
        lock_type=fs.lock_type, share_group=fs.share_group, staging_dir=fs.staging_dir, project=first.project, name=first.name,
        monitor=copy.deepcopy(first.monitor),
        stages=tuple(_explorer_stage(i, s, c) for i, (s, c) in enumerate(zip(stages, stage_claim_sets(stages),
                                                                              strict=True))),
    )
