"""ROLL's keys as rfthpc reads them: its top-level settings and role sections (`actor_train`,
`actor_infer`, `critic`, `reference`) in an rfthpc config, and in `rfthpc config import --from roll`.

`ROLL_MAP` maps ROLL's keys onto rfthpc's typed fields (or an argument of the chosen algorithm
function); `ROLL_KEYS` answers the rest: ignored with a note or refused (`rfthpc.dialects.mapping`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rfthpc.dialects.mapping import (
    CRITIC_LORA,
    NO_RAY,
    RUN_DIR,
    SP_OF_ACTOR,
    Answer,
    FnArg,
    FnChoice,
    Ignored,
    ReadWith,
    Refused,
    Target,
    Translated,
    apply_reading,
    lora_default,
    nothing_enabled,
    off,
    one_of,
    read_settings,
    unless,
)
from rfthpc.dialects.translation import flatten
from rfthpc.errors import ConfigError, Problems

ROLL_PLACEMENT = ("ROLL's placement of roles on GPUs; rfthpc's roles are Slurm jobs sized by cluster, "
                  "explorer.rollout_model.engine_num and slurm.*")


ROLL_REWARDS = ("ROLL's reward workers: rfthpc scores in the explorer with the taskset's reward function "
                "(default_reward_fn_type; module:function for your own) and, for a model judge, an auxiliary model "
                "(explorer.auxiliary_models)")


ROLL_DATA = ("ROLL's dataset settings: give the data as buffer.explorer_input.tasksets (path, split, format.prompt_key "
             "or messages_key)")


ROLL_TEMPLATE = ("rfthpc formats prompts with the model's own chat template (model.custom_chat_template or "
                 "chat_template_path to change it)")


ROLL_SEED = ("ROLL's global seed; rfthpc seeds the rollout engine (explorer.rollout_model.seed) and the task order "
             "(task_selector.seed), both 42 by default")


ROLL_MASKS = ("ROLL's RLVR loss masks are lite_ppo's: set algorithm.advantage_fn: lite_ppo with advantage_fn_args "
              "max_len_mask / difficulty_mask, difficulty_low_threshold, difficulty_high_threshold")


ROLL_ADVANTAGE_NORM = ("rfthpc's advantage functions normalise their own way; ROLL's reward and advantage normalisation "
                       "is algorithm.advantage_fn: lite_ppo with advantage_fn_args norm_mean_type / norm_std_type "
                       "(group, batch or null)")


ROLL_RLVR = "a sample weighting or mask of ROLL's RLVR pipeline, not in rfthpc; remove it"


ROLL_LOSS = ("a policy-loss variant of ROLL's RLVR pipeline: choose rfthpc's with algorithm.policy_loss_fn (ppo, topr, "
             "tis, cispo, ...)")


ROLL_OPD = "ROLL's on-policy distillation is not in rfthpc; remove it"


ROLL_TRAIN_STRATEGY = ("rfthpc trains with FSDP2 (ROLL's fsdp2_train; DeepSpeed gives the same results); Megatron-LM's "
                       "parallelism is not in rfthpc: remove it")


ROLL_SPEED = "a speed or memory switch of ROLL's; rfthpc computes the same values its own way"


ROLL_OUTPUT = f"{RUN_DIR}, with checkpoints, logs (log/) and metrics (monitor/) in it"


ROLL_SCHEDULING = ("scheduling of ROLL's generation; rfthpc's explorers batch their engine requests themselves "
                   "(explorer.runner_per_model)")


ROLL_SECTIONS = ("actor_train", "actor_infer", "critic", "reference")
"""ROLL's role sections read key by key; every other ROLL key is answered as a whole."""


ROLL_KEYS: dict[str, Answer] = {
    "hydra": Ignored("Hydra's own settings (ROLL starts through Hydra)"),
    "seed": Refused(ROLL_SEED + ": set those instead", one_of(42), ROLL_SEED),
    "rpc_timeout": Ignored(NO_RAY),
    "local_rank": Ignored("set by ROLL's launcher"),
    **{k: Ignored(ROLL_OUTPUT) for k in ("output_dir", "base_dir", "logging_dir", "checkpoint_config")},
    **{k: Ignored("profiling and dumps of ROLL's; rfthpc keeps every generation in its experience store") for k in (
        "rollout_dump_dir", "save_logging_board_dir", "length_profiler_dir", "profiler_output_dir", "otlp_output_dir",
        "profiler_timeline", "profiler_memory", "report_length_and_rewards")},
    "tracker_kwargs": Ignored("arguments of ROLL's tracker; rfthpc's wandb arguments are monitor.monitor_args"),
    "logging_steps": Ignored("every rfthpc role records its metrics every step"),
    "val_batch_size": Ignored("an evaluation runs each eval taskset whole"),
    "val_prompt_length": Ignored("evaluation uses the model's limits (model.max_prompt_tokens, max_model_len)"),
    "val_sequence_length": Ignored("evaluation uses the model's limits (model.max_prompt_tokens, max_model_len)"),
    "is_offload_states": Ignored("ROLL offloads a role's state when roles share GPUs; rfthpc's roles are separate "
                                 "Slurm jobs"),
    "is_offload_optimizer_states_in_train_step": Ignored("ROLL offloads a role's state when roles share GPUs; "
                                                         "rfthpc's roles are separate Slurm jobs"),
    "model_update_buffer_size_mb": Ignored("weights reach the explorers through <run dir>/weights/"),
    "transfer_backend": Ignored("weights reach the explorers through <run dir>/weights/"),
    "model_download_type": Ignored("rfthpc reads models from local paths (compute nodes have no internet)"),
    **{k: Ignored(ROLL_SCHEDULING) for k in ("generate_opt_level", "is_num_return_sequences_expand",
                                             "max_running_requests", "max_additional_running_prompts",
                                             "router_args")},
    "is_use_additional_prompts": Refused("ROLL fills a batch with extra prompts when filtering drops some; rfthpc's "
                                         "dynamic sampling is algorithm.filter_groups", off),
    "user_defined_rollout_loop_cls": Refused(
        "rfthpc's rollout of a task is the taskset's workflow (default_workflow_type, or module:function)",
        lambda v, g: not v or str(v).startswith("roll.distributed.scheduler.user_defined_rollout_loop")),
    "rollout_mock": Refused("ROLL's mocked rollouts are not in rfthpc; remove it", nothing_enabled),
    "reward_pretrain": Refused(ROLL_REWARDS, off),
    **{k: Refused(ROLL_REWARDS, off) for k in ("reward", "rewards", "reward_model")},
    "validation": Refused("evaluation data are buffer.explorer_input.eval_tasksets", off),
    "dataset_filter": Refused("ROLL's difficulty filter of the dataset: filter the dataset beforehand",
                              lambda v, g: not v or (isinstance(v, Mapping) and not v.get("source")
                                                     and not v.get("num_samples"))),
    "system_envs": Refused("environment variables: export them in the shell that submits (the roles inherit it), or "
                           "set explorer.env_vars for the explorers", off),
    "global_template": Refused(ROLL_TEMPLATE, off),
    "tag_to_template": Refused(ROLL_TEMPLATE, off),
    "l2": Refused("ROLL's L2 penalty is not in rfthpc (AdamW's weight decay is algorithm.optimizer.weight_decay)",
                  off),
    "use_pg_clip_range": Refused("set algorithm.policy_loss_fn_args clip_range_low / clip_range_high", off),
    "pg_clip_low": Refused("set algorithm.policy_loss_fn_args.clip_range_low", unless("use_pg_clip_range"),
                           "read only with use_pg_clip_range: true"),
    "pg_clip_high": Refused("set algorithm.policy_loss_fn_args.clip_range_high", unless("use_pg_clip_range"),
                            "read only with use_pg_clip_range: true"),
    "value_clip": Refused("rfthpc's value loss clips at 0.5", one_of(None, 0.5)),
    "target_kl": Refused("ROLL's adaptive KL controller: set algorithm.kl_penalty_fn_args adaptive: true, target_kl "
                         "and horizon", off),
    "kl_horizon": Ignored("read only by ROLL's adaptive KL controller (target_kl)"),
    "dual_clip_loss": Refused(
        "ROLL's dual clip bounds the loss at 1 + 2 x pg_clip: set algorithm.policy_loss_fn_args.clip_ratio_c to that",
        one_of(False), "rfthpc's ppo loss dual-clips negative advantages at policy_loss_fn_args.clip_ratio_c (3, "
                    "veRL's rule)"),
    **{k: Refused("rfthpc passes rewards to the advantage function as the reward function gives them; remove it",
                  off) for k in ("use_reward_scaling", "use_reward_norm", "whiten_rewards", "add_len_reward",
                                  "reward_clip")},
    "whiten_advantages": Refused(ROLL_ADVANTAGE_NORM, off),
    "norm_mean_type": Refused(ROLL_ADVANTAGE_NORM, off),
    "norm_std_type": Refused(ROLL_ADVANTAGE_NORM, off),
    "enable_reference": Ignored("rfthpc runs the reference model whenever a KL term needs it"),
    "enable_old_logprobs_recompute": Ignored("rfthpc's policy loss decides which log-probabilities it reads "
                                             "(algorithm.policy_loss_fn)"),
    "force_disable_old_logprobs_recompute": Ignored("rfthpc's policy loss decides which log-probabilities it reads "
                                                    "(algorithm.policy_loss_fn)"),
    "train_infer_correction": Refused("ROLL's train-inference correction: rfthpc's is algorithm.rollout_correction "
                                      "(veRL's keys)", nothing_enabled),
    **{k: Refused(ROLL_RLVR, off) for k in ("difficulty_loss_weight", "length_loss_weight", "balance_length",
                                             "error_max_len_clip")},
    "max_len_mask": Refused(ROLL_MASKS, off),
    "difficulty_mask": Refused(ROLL_MASKS, off),
    "difficulty_low_threshold": Refused(ROLL_MASKS, unless("difficulty_mask"), "read only with difficulty_mask"),
    "difficulty_high_threshold": Refused(ROLL_MASKS, unless("difficulty_mask"), "read only with difficulty_mask"),
    "error_max_len_threshold": Refused(ROLL_RLVR, unless("error_max_len_clip"), "read only with error_max_len_clip"),
    "mask_type": Ignored("read only with max_len_mask / difficulty_mask"),
    "minibatch_data_iter_num": Refused(ROLL_RLVR, one_of(1)),
    "postive_loss_coef": Refused(ROLL_LOSS, off),
    "use_topr_neg_loss_coef": Refused(ROLL_LOSS, off),
    "use_topr_loss": Refused(ROLL_LOSS, off),
    "use_policy_loss_type": Refused(ROLL_LOSS, one_of("PPO")),
    "rl_loss_coef": Refused(ROLL_LOSS, one_of(1, 1.0)),
    "importance_sampling": Refused(ROLL_LOSS + " (gspo weights whole sequences)", one_of("token")),
    "val_greedy": Refused("set temperature 0 in the eval taskset's rollout_args", off),
    "val_n_sample": Refused("set the eval taskset's repeat_times", one_of(1)),
    **{k: Refused(ROLL_OPD, off) for k in ("teacher", "student_train", "student_infer", "is_pure_opd", "use_opd")},
    "pure_opd_pipeline_type": Ignored("read only with is_pure_opd"),
    # The role sections, key by key: what every role has, then each role's own.
    **{f"*.{k}": Ignored(ROLL_PLACEMENT) for k in (
        "device_mapping", "world_size", "infer_batch_size", "num_gpus_per_worker", "max_concurrency", "backend_timeout",
        "offload_nccl", "name", "worker_cls", "model_update_frequency")},
    "*.system_envs*": Refused("environment variables: export them in the shell that submits (the roles inherit it), "
                              "or set explorer.env_vars for the explorers", off),
    **{f"*.{k}": Ignored(ROLL_SPEED) for k in (
        "use_sequence_packing", "sequence_packing_args.*", "use_dynamic_batching_in_infer",
        "max_tokens_per_microbatch_in_infer", "sequence_length_round_in_*", "model_args.attn_implementation",
        "model_args.gradient_checkpointing_use_reentrant", "model_args.device_map")},
    "*.router_replay.*": Refused("MoE router replay is not in rfthpc; remove it", one_of(None, "disable", False)),
    "critic.model_args.lora_target": Refused(CRITIC_LORA, off),
    "critic.model_args.adapter_name_or_path": Refused(CRITIC_LORA, off),
    "*.model_args.additional_target": Refused("rfthpc's adapter trains no other layer than the ones it adapts (it "
                                              "hands explorers the adapter alone): remove it", off),
    "*.model_args.autocast_adapter_dtype": Ignored("rfthpc keeps the adapter in float32 while training"),
    **{f"*.model_args.{k}": Ignored("a LoRA setting read with actor_train's (model.lora), or only with lora_target")
       for k in ("lora_rank", "lora_alpha", "lora_dropout", "lora_target", "adapter_name_or_path")},
    "*.model_args.moe_aux_loss_coef": Refused("rfthpc adds no MoE load-balancing loss; remove it", off),
    "*.model_args.model_config_kwargs": Refused("changes the model's config before training; rfthpc trains the model "
                                                "as its config.json says: edit a copy of the model instead", off),
    "*.model_args.freeze_module_prefix": Refused("rfthpc trains every weight; remove it", off),
    "*.model_args.ulysses_size": Ignored(SP_OF_ACTOR.replace("the actor does", "actor_train does")),
    "*.model_args.model_type": Refused("ROLL's model kind (value head, reward model, VLM); rfthpc picks the head by "
                                       "role", off),
    "*.model_args.num_labels": Ignored("rfthpc's critic has one value head"),
    "*.data_args.template": Ignored(ROLL_TEMPLATE),
    "*.data_args.preprocessing_num_workers": Ignored(ROLL_SPEED),
    "actor_train.data_args.*": Refused(ROLL_DATA),
    "*.data_args.*": Ignored("only actor_train's data_args name the training data"),
    "actor_train.strategy_args.strategy_name": Refused(ROLL_TRAIN_STRATEGY, one_of("fsdp2_train", "deepspeed_train"),
                                                       "rfthpc trains with FSDP2"),
    "actor_train.strategy_args.strategy_config.*": Ignored(
        "settings of ROLL's training strategy; rfthpc shards with FSDP2 (trainer.param_offload, optimizer_offload, "
        "enable_gradient_checkpointing)"),
    "actor_train.training_args.gradient_accumulation_steps": Refused(
        "ROLL's optimizer update takes per_device_train_batch_size x gradient_accumulation_steps x data-parallel size "
        "responses; rfthpc's takes trainer.ppo_mini_batch_size groups (default: one update per step): set that"),
    **{f"actor_train.training_args.{k}": Ignored("set by ROLL itself, or not read by its RL pipelines") for k in (
        "num_train_epochs", "max_steps", "output_dir", "data_seed", "dataloader_num_workers")},
    "actor_train.training_args.seed": Refused(ROLL_SEED + ": set those instead", one_of(42), ROLL_SEED),
    "actor_infer.strategy_args.strategy_name": Refused("rfthpc's rollout engine is vLLM (or transformers); SGLang and "
                                                       "Hugging Face generation are not: remove it", one_of("vllm"),
                                                       "rfthpc's rollout engine is vLLM"),
    "actor_infer.strategy_args.strategy_config.*": Ignored(
        "engine settings rfthpc chooses itself; the ones it takes are under explorer.rollout_model "
        "(gpu_memory_utilization, tensor_parallel_size, enforce_eager, enable_prefix_caching, enable_chunked_prefill)"),
    "actor_infer.model_args.model_name_or_path": Ignored("the rollout engine runs the trained policy, model.model_path"),
    "actor_infer.generating_args.do_sample": Refused("greedy rollouts: set temperature 0 in the taskset's "
                                                     "rollout_args", one_of(None, True)),
    "actor_infer.generating_args.num_beams": Refused("rfthpc samples; beam search is not available", one_of(None, 1)),
    "actor_infer.generating_args.repetition_penalty": Refused("a repetition penalty is not available in rfthpc",
                                                              one_of(None, 1, 1.0)),
    "actor_infer.generating_args.length_penalty": Ignored("read only by beam search"),
    "actor_infer.generating_args.max_length": Ignored("the limit is model.max_model_len"),
    "actor_infer.generating_args.stop_strings": Refused("generation stops at the end-of-sequence token; stop strings "
                                                        "are not available in rfthpc", off),
    "actor_infer.generating_args.include_stop_str_in_output": Ignored("read only with stop_strings"),
    "reference.*": Ignored("the reference model runs inside rfthpc's trainer, sharded like the actor; its KL terms are "
                           "algorithm.kl_loss_fn / kl_penalty_fn"),
    "critic.model_args.dtype": Ignored("the critic computes in model.dtype, like the actor"),
    "critic.model_args.disable_gradient_checkpointing": Ignored("the critic follows the actor's "
                                                                "trainer.enable_gradient_checkpointing"),
    "critic.strategy_args.strategy_name": Refused(ROLL_TRAIN_STRATEGY, one_of("fsdp2_train", "deepspeed_train"),
                                                  "rfthpc trains with FSDP2"),
    "critic.strategy_args.strategy_config.*": Ignored("settings of ROLL's training strategy; rfthpc shards with FSDP2"),
    "actor_train.*": Refused("a setting of ROLL's actor_train worker with no rfthpc counterpart (the ones rfthpc reads "
                             "are in docs/migration.md); remove it"),
    "actor_infer.*": Refused("a setting of ROLL's actor_infer worker with no rfthpc counterpart (the ones rfthpc reads "
                             "are in docs/migration.md); remove it"),
    "critic.*": Refused("a setting of ROLL's critic worker with no rfthpc counterpart; rfthpc's critic is "
                        "model.critic_model_path, trainer.critic_lr, critic_lr_warmup_steps_ratio and critic_warmup"),
}
"""ROLL keys that ROLL_MAP does not map: a top-level key, or a key of a role section (ROLL_SECTIONS) by its
dotted path. A role section's last entry answers its keys that no other entry does."""


ROLL_PG_VARIANTS = ("vanilla", "tis", "topr", "cispo", "kimi15", "ppo")
"""ROLL's `pg_variant` values; each is the rfthpc policy loss of the same name (ROLL's `vanilla` is the
plain policy gradient, as rfthpc's)."""


def _roll_pg_variant(variant: Any, _given: Mapping[str, Any]) -> str:
    if variant not in ROLL_PG_VARIANTS:
        raise ConfigError(f"{variant!r}; ROLL's variants rfthpc has: {', '.join(ROLL_PG_VARIANTS)} (or set "
                          "algorithm.policy_loss_fn)")
    return str(variant)


def _roll_kl(use: Any, given: Mapping[str, Any]) -> str:
    """ROLL switches each KL term with a flag and names the estimator of both in `kl_penalty`."""
    return str(given.get("kl_penalty") or "kl") if use else "none"


def _roll_dtype(value: Any, _given: Mapping[str, Any]) -> Any:
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(value, value)


def _roll_resume(value: Any, _given: Mapping[str, Any]) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{value!r}: rfthpc resumes from the newest checkpoint in its own run directory "
                      "(continue_from_checkpoint: true); to start from another model, set model.model_path")


_INFER = "actor_infer.strategy_args.strategy_config."


_ROLL_LORA = "actor_train.model_args."


ROLL_LORA_RANK = 8
"""ROLL's default rank; its default lora_alpha is twice the rank."""


def _roll_lora(value: Any, given: Mapping[str, Any]) -> Any:
    # ROLL trains an adapter when lora_target is set, and reads its other LoRA settings only then.
    return value if given.get(_ROLL_LORA + "lora_target") else None


def roll_lora_target(target: Any, _given: Mapping[str, Any] | None = None) -> Any:
    """ROLL's lora_target: `all-linear`, layer names separated by commas, or a regular expression."""
    if not isinstance(target, str) or any(c in target for c in "*$|("):
        return target
    names = [name.strip() for name in target.split(",") if name.strip()]
    return names[0] if names == ["all-linear"] else names


ROLL_MAP: dict[str, Target] = {
    "pretrain": "model.model_path",
    "exp_name": "name",
    "rollout_batch_size": "buffer.batch_size",
    "num_return_sequences_in_group": "algorithm.repeat_times",
    "prompt_length": "model.max_prompt_tokens",
    "response_length": "model.max_response_tokens",
    "sequence_length": "model.max_model_len",
    "max_steps": "buffer.total_steps",
    "save_steps": "trainer.save_interval",
    "eval_steps": "explorer.eval_interval",
    "max_ckpt_to_keep": Translated("trainer.max_checkpoints_to_keep", lambda keep, _given: keep or None),
    "resume_from_checkpoint": Translated("continue_from_checkpoint", _roll_resume),
    "track_with": Translated("monitor.monitor_type", lambda sink, _given: "console" if sink == "stdout" else sink),
    "num_nodes": "cluster.node_num",
    "num_gpus_per_node": "cluster.gpu_per_node",
    "ppo_epochs": "trainer.ppo_epochs",
    "max_grad_norm": "trainer.grad_clip",
    "critic_warmup": "trainer.critic_warmup",
    "adv_estimator": FnChoice("advantage_fn", lambda name, _given: str(name)),
    "pg_variant": FnChoice("policy_loss_fn", _roll_pg_variant),
    "loss_agg_mode": "algorithm.loss_agg_mode",
    "entropy_loss_coef": "algorithm.entropy_loss_fn_args.entropy_coef",
    "use_kl_loss": FnChoice("kl_loss_fn", _roll_kl),
    "kl_loss_coef": "algorithm.kl_loss_fn_args.kl_coef",
    "add_token_level_kl": FnChoice("kl_penalty_fn", _roll_kl),
    "init_kl_coef": "algorithm.kl_penalty_fn_args.kl_coef",
    "kl_penalty": ReadWith("use_kl_loss, add_token_level_kl"),
    "lambd": FnArg("advantage_fn", "lam"),
    "gamma": FnArg("advantage_fn", "gamma"),
    "advantage_clip": FnArg("advantage_fn", "advantage_clip"),
    "pg_clip": FnArg("policy_loss_fn", "clip_range"),
    "actor_train.pg_variant": FnChoice("policy_loss_fn", _roll_pg_variant),
    "actor_train.topr_positive_weight": FnArg("policy_loss_fn", "positive_weight"),
    "actor_train.topr_negative_weight": FnArg("policy_loss_fn", "negative_weight"),
    "actor_train.model_args.model_name_or_path": "model.model_path",
    _ROLL_LORA + "lora_target": Translated("model.lora.target_modules", roll_lora_target),
    **{_ROLL_LORA + k: Translated(f"model.lora.{k}", _roll_lora) for k in ("lora_rank", "lora_alpha", "lora_dropout")},
    _ROLL_LORA + "adapter_name_or_path": Translated("model.lora.path", _roll_lora),
    "actor_train.model_args.dtype": Translated("model.dtype", _roll_dtype),
    "actor_train.model_args.ulysses_size": Translated("trainer.ulysses_sequence_parallel_size",
                                                      lambda size, _given: size or 1),
    "actor_train.model_args.disable_gradient_checkpointing": Translated(
        "trainer.enable_gradient_checkpointing", lambda disable, _given: not disable),
    "actor_train.training_args.learning_rate": "algorithm.optimizer.lr",
    "actor_train.training_args.weight_decay": "algorithm.optimizer.weight_decay",
    "actor_train.training_args.warmup_steps": "algorithm.optimizer.lr_warmup_steps",
    "actor_train.training_args.warmup_ratio": "algorithm.optimizer.lr_warmup_steps_ratio",
    "actor_train.training_args.lr_scheduler_type": "algorithm.optimizer.lr_scheduler_type",
    "actor_train.training_args.per_device_train_batch_size": "trainer.ppo_micro_batch_size_per_gpu",
    "actor_train.training_args.save_hf_model": Translated("trainer.save_hf_checkpoint",
                                                          lambda save, _given: "always" if save else None),
    "actor_train.use_dynamic_batching_in_train": "trainer.use_dynamic_bsz",
    "actor_train.max_tokens_per_microbatch_in_train": "trainer.max_token_len_per_gpu",
    "actor_infer.model_args.dtype": Translated("explorer.rollout_model.dtype", _roll_dtype),
    "actor_infer.generating_args.max_new_tokens": "model.max_response_tokens",
    "actor_infer.generating_args.temperature": "model.temperature",
    "actor_infer.generating_args.top_p": "model.top_p",
    "actor_infer.generating_args.top_k": "model.top_k",
    "actor_infer.generating_args.logprobs": "model.logprobs",
    "actor_infer.generating_args.num_return_sequences": "algorithm.repeat_times",
    **{_INFER + k: f"explorer.rollout_model.{k}" for k in (
        "gpu_memory_utilization", "tensor_parallel_size", "enforce_eager", "enable_prefix_caching",
        "enable_chunked_prefill")},
    "critic.model_args.model_name_or_path": "model.critic_model_path",
    "critic.training_args.learning_rate": "trainer.critic_lr",
    "critic.training_args.warmup_ratio": "trainer.critic_lr_warmup_steps_ratio",
}
"""ROLL keys (top level, or dotted within a role section) -> what they set in rfthpc. A null value is
ROLL's "unset". `async_generation_ratio` is read by `apply_roll_keys` itself."""


def _async_generation_ratio(raw: dict[str, Any], problems: Problems) -> None:
    """ROLL's `async_generation_ratio: N` (generation runs N batches ahead of training; 0 is
    synchronous) is `synchronizer.sync_interval: 1, sync_offset: N`; a synchronizer section that says
    otherwise is a problem, since the two would disagree on the staleness bound."""
    ratio = raw.pop("async_generation_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio < 0 or ratio != int(ratio):
        problems.add(f"async_generation_ratio: {ratio!r}; use a whole number >= 0 (ROLL: batches generated ahead "
                     "of training; rfthpc's synchronizer.sync_offset)")
        return
    sync = raw.setdefault("synchronizer", {})
    if not isinstance(sync, dict):
        return  # typed conversion reports it
    wanted = {"sync_interval": 1, "sync_offset": int(ratio)}
    clash = {k: sync[k] for k, v in wanted.items() if sync.get(k) is not None and sync[k] != v}
    if clash:
        given = ", ".join(f"synchronizer.{k}: {v}" for k, v in clash.items())
        problems.add(f"async_generation_ratio: {int(ratio)} means synchronizer.sync_interval: 1 and sync_offset: "
                     f"{int(ratio)}, but the config sets {given}; keep one of the two")
        return
    for key, value in wanted.items():
        if sync.get(key) is None:
            sync[key] = value
            problems.map(f"synchronizer.{key}", value, "async_generation_ratio", "ROLL")


def apply_roll_keys(raw: dict[str, Any], problems: Problems) -> None:
    """Take ROLL's keys out of `raw` (in place): its top-level keys and role sections (ROLL_SECTIONS).
    Each is mapped onto rfthpc's keys (ROLL_MAP; an explicit rfthpc key wins), ignored with a note or
    refused (ROLL_KEYS); any other key of a role section is refused by the section's entry."""
    if "async_generation_ratio" in raw:
        _async_generation_ratio(raw, problems)
    flat: dict[str, Any] = {}
    for key in list(raw):
        if key in ROLL_SECTIONS:
            value = raw.pop(key)
            flat.update(flatten(value, key) if isinstance(value, dict) else {key: value})
        elif key in ROLL_MAP or key in ROLL_KEYS:
            flat[key] = raw.pop(key)
    if flat:
        reading = read_settings(flat, flat, ROLL_MAP, ROLL_KEYS, "ROLL", "", problems)
        if "model.lora.target_modules" in reading.targets:
            rank = reading.targets.setdefault("model.lora.lora_rank", (ROLL_LORA_RANK, "ROLL's default lora_rank"))[0]
            lora_default(reading, "lora_alpha", 2 * rank, "ROLL's default lora_alpha (twice lora_rank)")
        apply_reading(raw, reading, problems, "ROLL")
