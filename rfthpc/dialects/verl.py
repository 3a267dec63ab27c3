"""veRL's settings as rfthpc reads them: `trainer.trainer_config` of a Trinity-RFT config (its veRL
section), and the overrides of a veRL run (`rfthpc.dialects.verl_import`).

`VERL_MAP` maps veRL's keys onto rfthpc's typed fields (or onto an argument of the algorithm function
the config chooses); `VERL_KEYS` answers the rest: ignored with a note or refused (`rfthpc.dialects.mapping`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rfthpc.dialects.mapping import (
    CRITIC_LORA,
    NO_RAY,
    RUN_DIR,
    SP_OF_ACTOR,
    Answer,
    FnArg,
    FnChoice,
    Ignored,
    Refused,
    Target,
    Translated,
    apply_reading,
    chosen_function,
    lora_default,
    off,
    one_of,
    read_settings,
    same_as,
    same_text,
    takes_argument,
    unless,
)
from rfthpc.dialects.translation import flatten
from rfthpc.errors import ConfigError, Problems
from rfthpc.not_built import MULTIMODAL

if TYPE_CHECKING:
    from rfthpc.config.schema import Config

MEGATRON = "rfthpc trains with FSDP2 only (no Megatron-LM parallelism): remove it, or set fsdp / fsdp2"


FSDP2 = "rfthpc always trains with FSDP2 (veRL's fsdp and fsdp2 strategies give the same results)"


SPEED = "a speed or memory switch of veRL's; rfthpc computes the same values its own way"


FSDP_MECHANICS = "how veRL wraps and shards the model with FSDP; rfthpc shards with FSDP2 its own way, to the same results"


MEGATRON_OPTIM = ("a Megatron-LM optimizer setting; rfthpc's schedule is algorithm.optimizer (lr_scheduler_type "
                  "constant or cosine, lr_warmup_steps, min_lr_ratio)")


CRITIC_OPTIM = ("the critic's optimizer takes algorithm.optimizer's settings; only its learning rate "
                "(trainer.critic_lr) and warm-up ratio (trainer.critic_lr_warmup_steps_ratio) are its own")


SET_BY_TRINITY_VERL = "Trinity-RFT sets it from its own sections; rfthpc reads those"


MTP = ("multi-token prediction (MTP layers trained and used for speculative decoding) is not in rfthpc; remove "
       "it")


DAPO_MANAGER = ("veRL's naive and dapo reward managers both score each response by its data source (rfthpc's "
                "verl_reward); dapo adds the overlong penalty its overlong_buffer settings give, which are "
                "algorithm.overlong_buffer")


REMOTE_CODE = ("rfthpc loads models and tokenizers with transformers' own classes, never a model's own code: a "
               "model whose architecture transformers has (config.json's model_type, e.g. deepseek_v3, qwen2_vl) "
               "loads the same; one that exists only as remote code fails when the trainer loads it")


REWARD_MANAGER = ("veRL's reward managers: rfthpc scores each response with the taskset's reward function "
                  "(default_reward_fn_type; math_dapo_reward for veRL's dapo)")


_FSDP_STRATEGY = one_of("fsdp", "fsdp2")


_MODEL_SECTIONS = ("actor_rollout_ref.model", "critic.model")


def _model_keys(prefix: str) -> dict[str, Answer]:
    return {
        f"{prefix}.external_lib": Refused("a module veRL imports to register model classes; rfthpc loads models with "
                                          "transformers' Auto classes: remove it", off),
        **{f"{prefix}.{key}": Refused("changes the model's Hugging Face config before training; rfthpc trains the "
                                      "model as its config.json says: edit a copy of the model instead", off)
           for key in ("override_config", "override_config.*")},
        f"{prefix}.trust_remote_code": Ignored(REMOTE_CODE),
        f"{prefix}.use_shm": Ignored("veRL copies the model to /dev/shm first; rfthpc reads it from its path"),
        f"{prefix}.enable_activation_offload": Refused(
            "activation offload is not in rfthpc: use trainer.enable_gradient_checkpointing, trainer.param_offload / "
            "optimizer_offload, or a smaller trainer.max_token_len_per_gpu", off),
        f"{prefix}.lora.rank": Refused(
            "veRL's LoRA settings of its Megatron workers; rfthpc trains with FSDP2, where veRL's keys are "
            "lora_rank, lora_alpha and target_modules (read as model.lora): set those instead", off),
        f"{prefix}.lora.*": Ignored("a setting of veRL's Megatron LoRA, read only with lora.rank > 0"),
        f"{prefix}.hf_config_path": Refused("rfthpc reads the model's config from its path: copy it there", off),
        f"{prefix}.use_fused_kernels": Ignored(SPEED),
        f"{prefix}.fused_kernel_options.*": Ignored(SPEED),
        f"{prefix}.use_liger": Ignored(SPEED),
        f"{prefix}.tiled_mlp.*": Ignored(SPEED),
        f"{prefix}.mtp.enable": Refused(MTP, off),
        f"{prefix}.mtp.*": Ignored("read only with mtp.enable"),
    }


def _fsdp_keys(prefix: str) -> dict[str, Answer]:
    return {
        **{f"{prefix}.fsdp_config.{k}": Ignored(FSDP_MECHANICS) for k in (
            "wrap_policy.*", "fsdp_size", "forward_prefetch", "reshard_after_forward", "use_orig_params", "seed",
            "forward_only", "use_torch_compile", "entropy_from_logits_with_chunking", "entropy_checkpointing")},
        f"{prefix}.fsdp_config.strategy": Refused(MEGATRON, _FSDP_STRATEGY, FSDP2),
        f"{prefix}.fsdp_config.offload_policy": Refused("FSDP2's CPU offload policy: set trainer.param_offload / "
                                                        "optimizer_offload", off),
        f"{prefix}.fsdp_config.model_dtype": Refused("rfthpc keeps float32 master weights (veRL's fp32)",
                                                     one_of("fp32", "float32")),
        f"{prefix}.fsdp_config.dtype": Refused("rfthpc computes in model.dtype (bfloat16 on GPUs by default): set "
                                               "model.dtype", one_of("bfloat16", "bf16")),
        f"{prefix}.fsdp_config.mixed_precision.param_dtype": Refused(
            "rfthpc computes in model.dtype (bfloat16 on GPUs by default): set model.dtype",
            one_of("bfloat16", "bf16")),
        f"{prefix}.fsdp_config.mixed_precision.reduce_dtype": Refused(
            "rfthpc reduces gradients in float32 (veRL's default); remove it",
            one_of("float32", "fp32", "bfloat16", "bf16"),
            "rfthpc reduces gradients across GPUs in float32 whatever this says: bfloat16 halves that traffic but "
            "rounds the summed gradient, float32 sums more precisely, so the update differs only by that rounding"),
        f"{prefix}.fsdp_config.mixed_precision.buffer_dtype": Refused(
            "rfthpc keeps buffers in float32 (veRL's default)", one_of("float32", "fp32")),
        f"{prefix}.fsdp_config.full_determinism": Refused("rfthpc does not force deterministic kernels; remove it",
                                                          off),
    }


def _optim_keys(prefix: str) -> dict[str, Answer]:
    return {
        f"{prefix}.optim.total_training_steps": Ignored("set by veRL and Trinity-RFT at run time; rfthpc's schedule "
                                                        "spans buffer.total_steps"),
        f"{prefix}.optim.optimizer": Refused("rfthpc's optimizer is AdamW: remove it", one_of("adamw", "adam")),
        f"{prefix}.optim.optimizer_impl": Refused("rfthpc's optimizer is torch's AdamW: remove it",
                                                  one_of("torch.optim")),
        f"{prefix}.optim.num_cycles": Refused("rfthpc's cosine schedule decays once (veRL's num_cycles 0.5)",
                                              one_of(0.5)),
        f"{prefix}.optim.override_optimizer_config": Refused("rfthpc's AdamW takes algorithm.optimizer's settings "
                                                             "only", off),
        **{f"{prefix}.optim.{k}": Refused(MEGATRON_OPTIM, one_of(*ok)) for k, ok in (
            ("lr_warmup_init", (0, 0.0)), ("lr_decay_steps", (None,)), ("lr_decay_style", ("constant",)),
            ("min_lr", (0, 0.0)), ("weight_decay_incr_style", ("constant",)),
            ("lr_wsd_decay_style", ("exponential",)), ("lr_wsd_decay_steps", (None,)),
            ("use_checkpoint_opt_param_scheduler", (False,)))},
    }


_A = "actor_rollout_ref.actor."


_C = "critic."


VERL_KEYS: dict[str, Answer] = {
    "actor_rollout_ref.hybrid_engine": Ignored("veRL colocates rollout and training; rfthpc's explorers and trainer "
                                               "are separate Slurm jobs by design"),
    "actor_rollout_ref.nccl_timeout": Ignored("the timeout of veRL's process groups; rfthpc's trainer and explorers "
                                              "share none"),
    "actor_rollout_ref.synchronizer*": Ignored(SET_BY_TRINITY_VERL),
    "actor_rollout_ref.explorer_name": Ignored(SET_BY_TRINITY_VERL),
    "actor_rollout_ref.rollout.*": Ignored("rollouts are configured under explorer.rollout_model and each taskset's "
                                           "rollout_args (as in Trinity-RFT)"),
    "actor_rollout_ref.ref.strategy": Ignored(FSDP2),
    "actor_rollout_ref.ref.*": Ignored("the reference model runs inside rfthpc's trainer, sharded and batched like "
                                       "the actor (trainer.*)"),
    "actor_rollout_ref.model.tokenizer_path": Refused("rfthpc reads the tokenizer from model.model_path: copy it "
                                                      "there", off),
    **_model_keys("actor_rollout_ref.model"),
    **_model_keys("critic.model"),
    "critic.model.lora_rank": Refused(CRITIC_LORA, off),
    "critic.model.lora_adapter_path": Refused(CRITIC_LORA, off),
    **{f"critic.model.{k}": Ignored("a LoRA setting, read only with lora_rank > 0") for k in (
        "lora_alpha", "target_modules", "exclude_modules")},
    _A + "strategy": Refused(MEGATRON, _FSDP_STRATEGY, FSDP2),
    _A + "ppo_micro_batch_size": Refused("veRL's deprecated global micro-batch size: set "
                                         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (rfthpc's "
                                         "trainer.ppo_micro_batch_size_per_gpu)", off),
    _A + "shuffle": Refused("veRL shuffles a batch before cutting it into mini-batches; rfthpc keeps the order "
                            "experience was committed in: remove it", off),
    _A + "data_loader_seed": Ignored("the seed of veRL's mini-batch shuffle (actor.shuffle), which rfthpc does not do"),
    _A + "use_torch_compile": Ignored(SPEED),
    _A + "use_fused_kernels": Ignored(SPEED),
    _A + "entropy_from_logits_with_chunking": Ignored(SPEED),
    _A + "entropy_checkpointing": Ignored(SPEED),
    _A + "calculate_entropy": Ignored("a switch of veRL's entropy metric; it changes no update"),
    _A + "calculate_sum_pi_squared": Ignored("a switch of one of veRL's metrics; it changes no update"),
    _A + "sum_pi_squared_checkpointing": Ignored(SPEED),
    _A + "use_prefix_grouper": Ignored("rfthpc shares each prompt's forward pass among its responses with "
                                       "trainer.share_prompt_forward (on by default), to the same results"),
    _A + "rollout_n": Ignored("the responses per task are algorithm.repeat_times"),
    _A + "freeze_vision_tower": Refused(MULTIMODAL, off),
    _A + "router_replay.*": Refused("MoE router replay is not in rfthpc; remove it", one_of(None, "disabled", False)),
    _A + "load_weight": Refused("rfthpc always starts from the weights in model.model_path; remove it", one_of(True)),
    _A + "checkpoint.*": Ignored("rfthpc's checkpoints always hold model, optimizer and extra state; a merged Hugging "
                                 "Face copy is trainer.save_hf_checkpoint"),
    _A + "megatron.*": Ignored("Megatron-LM settings, read only with strategy megatron (which rfthpc refuses here; "
                               "config import --from verl translates a Megatron run to FSDP2)"),
    _A + "profile*": Ignored("profiling of veRL's workers"),
    **_fsdp_keys("actor_rollout_ref.actor"),
    **_optim_keys("actor_rollout_ref.actor"),
    _C + "strategy": Refused(MEGATRON, _FSDP_STRATEGY, FSDP2),
    _C + "enable": Ignored("rfthpc trains a critic when algorithm.advantage_fn needs one (gae, ppo)"),
    _C + "rollout_n": Ignored("the responses per task are algorithm.repeat_times"),
    _C + "model.tokenizer_path": Ignored(f"{SET_BY_TRINITY_VERL}: the critic's tokenizer is read from "
                                         "model.critic_model_path"),
    **_fsdp_keys("critic.model"),
    **_optim_keys("critic"),
    _C + "optim.lr_scheduler_type": Refused("the critic's learning rate is constant after its warm-up "
                                            "(trainer.critic_lr, trainer.critic_lr_warmup_steps_ratio)",
                                            one_of(None, "constant")),
    _C + "optim.warmup_style": Refused("the critic's learning rate is constant after its warm-up (trainer.critic_lr, "
                                       "trainer.critic_lr_warmup_steps_ratio)", one_of(None, "constant")),
    _C + "optim.min_lr_ratio": Ignored("read only by a cosine schedule; the critic's is constant"),
    _C + "optim.lr_warmup_steps": Refused("the critic's warm-up is trainer.critic_lr_warmup_steps_ratio",
                                          one_of(None, -1)),
    _C + "optim.weight_decay": Refused(CRITIC_OPTIM, same_as(_A + "optim.weight_decay", 0.01)),
    _C + "optim.betas": Refused(CRITIC_OPTIM, same_as(_A + "optim.betas", [0.9, 0.999])),
    _C + "optim.clip_grad": Refused(CRITIC_OPTIM, same_as(_A + "grad_clip", 1.0)),
    _C + "grad_clip": Refused("the critic's gradient clip is the actor's (trainer.grad_clip)",
                              same_as(_A + "grad_clip", 1.0)),
    _C + "ppo_micro_batch_size": Refused("veRL's deprecated global micro-batch size: set "
                                         "critic.ppo_micro_batch_size_per_gpu", off),
    _C + "ppo_mini_batch_size": Ignored("the critic is updated on the actor's mini-batches "
                                        "(trainer.ppo_mini_batch_size); Trinity-RFT sets it so too"),
    _C + "ppo_epochs": Refused("the critic makes as many passes as the actor (trainer.ppo_epochs)",
                               same_as(_A + "ppo_epochs", 1)),
    _C + "loss_agg_mode": Refused("the critic's loss is aggregated like the actor's (algorithm.loss_agg_mode)",
                                  same_as(_A + "loss_agg_mode", "token-mean")),
    _C + "cliprange_value": Refused("rfthpc's value loss clips at 0.5 (veRL's default)", one_of(0.5)),
    _C + "ulysses_sequence_parallel_size": Ignored(SP_OF_ACTOR),
    _C + "model.fsdp_config.ulysses_sequence_parallel_size": Ignored(SP_OF_ACTOR),
    _C + "shuffle": Refused("veRL shuffles a batch before cutting it into mini-batches; rfthpc keeps the order "
                            "experience was committed in: remove it", off),
    _C + "data_loader_seed": Ignored("the seed of veRL's mini-batch shuffle, which rfthpc does not do"),
    **{_C + k: Ignored("the critic is trained in the actor's micro-batches (trainer.ppo_micro_batch_size_per_gpu, "
                       "use_dynamic_bsz, max_token_len_per_gpu)") for k in (
        "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "forward_max_token_len_per_gpu", "forward_micro_batch_size",
        "forward_micro_batch_size_per_gpu")},
    _C + "checkpoint.*": Ignored("rfthpc's checkpoints always hold model, optimizer and extra state"),
    _C + "megatron.*": Ignored("Megatron-LM settings, read only with strategy megatron, which rfthpc refuses"),
    _C + "load_weight": Refused("rfthpc always starts the critic from model.critic_model_path; remove it",
                                one_of(True)),
    _C + "profile*": Ignored("profiling of veRL's workers"),
    "algorithm.use_pf_ppo": Refused("veRL's preference-feedback PPO reweighting is not in rfthpc; remove it", off),
    "algorithm.pf_ppo.*": Ignored("read only with algorithm.use_pf_ppo"),
    "algorithm.filter_groups.max_inflight_gen_batches": Ignored("rfthpc's explorers generate asynchronously anyway"),
    "reward_model.enable": Refused(
        "veRL's reward-model worker: rfthpc scores in the explorer; serve the reward model as an auxiliary model "
        "(explorer.auxiliary_models) and score with math_rm_workflow or a reward function", off),
    "reward_model.reward_manager": Refused(REWARD_MANAGER, one_of("naive", "dapo"), DAPO_MANAGER),
    "reward_manager.name": Refused(REWARD_MANAGER, one_of("naive", "dapo"), DAPO_MANAGER),
    "reward_manager.source": Ignored("where veRL looks up its reward manager (its registry or a module)"),
    "reward_manager.module.path": Refused(REWARD_MANAGER + "; to score your own way, name your reward function "
                                                           "(module:function)", off),
    "reward_manager.module.name": Ignored("read only with reward_manager.module.path"),
    "reward_model.overlong_buffer.log": Ignored("rfthpc always records the overlong penalty"),
    "reward_model.reward_kwargs.overlong_buffer_cfg.log": Ignored("rfthpc always records the overlong penalty"),
    "reward.reward_kwargs.overlong_buffer_cfg.log": Ignored("rfthpc always records the overlong penalty"),
    "reward_model.*": Ignored("a setting of veRL's reward-model worker, read only with reward_model.enable"),
    **{f"custom_reward_function.{k}": Refused(
        "a reward function is the taskset's default_reward_fn_type in rfthpc; a veRL function of yours is "
        "verl_reward with reward_fn_args {compute_score: file.py:name} (rfthpc config import --from verl sets it)",
        harmless) for k, harmless in (("path", off), ("name", unless("custom_reward_function.path")))},
    "data.*": Ignored("veRL's data section (Trinity-RFT ignores it too); tasks come from "
                      "buffer.explorer_input.tasksets (data.train_files: tasksets[i].path; data.max_prompt_length: "
                      "model.max_prompt_tokens; data.train_batch_size: buffer.batch_size prompts per step)"),
    "trainer.balance_batch": Ignored("veRL reorders a batch to even out tokens across GPUs; rfthpc packs "
                                     "micro-batches by token count (trainer.use_dynamic_bsz), to the same update"),
    "trainer.total_epochs": Ignored("Trinity-RFT sets it too; epochs are buffer.total_epochs"),
    "trainer.total_training_steps": Ignored("Trinity-RFT sets it too; steps are buffer.total_steps"),
    "trainer.project_name": Ignored(f"Trinity-RFT sets it from `project`; {RUN_DIR}"),
    "trainer.experiment_name": Ignored(f"Trinity-RFT sets it from `name`; {RUN_DIR}"),
    "trainer.group_name": Ignored(f"Trinity-RFT sets it from `group`; {RUN_DIR}"),
    "trainer.default_local_dir": Ignored(f"Trinity-RFT sets it to its run directory; {RUN_DIR}"),
    "trainer.logger": Ignored("metrics sinks are monitor.monitor_type (console, wandb, tensorboard)"),
    **{f"trainer.{k}": Ignored("rfthpc keeps every generation in its experience store (`rfthpc store export`)")
       for k in ("log_val_generations", "val_generations_to_log_to_wandb", "rollout_data_dir", "validation_data_dir")},
    "trainer.nnodes": Ignored("Trinity-RFT sets it from `cluster`; the trainer's GPUs follow cluster and "
                              "slurm.trainer"),
    "trainer.n_gpus_per_node": Ignored("Trinity-RFT sets it from `cluster`; the trainer's GPUs follow cluster and "
                                       "slurm.trainer"),
    "trainer.save_freq": Ignored("Trinity-RFT sets it from trainer.save_interval, which rfthpc reads"),
    "trainer.test_freq": Ignored("evaluation runs every explorer.eval_interval policy versions"),
    "trainer.val_before_train": Ignored("evaluation on start-up is explorer.eval_on_startup"),
    "trainer.val_only": Refused("rfthpc has no evaluation-only mode; remove it", off),
    "trainer.resume_mode": Ignored("Trinity-RFT sets it from continue_from_checkpoint, which rfthpc reads"),
    "trainer.resume_from_path": Refused("rfthpc resumes from the newest checkpoint in its run directory "
                                        "(continue_from_checkpoint); to start from another model, set "
                                        "model.model_path",
                                        lambda v, g: not v or g.get("trainer.resume_mode", "auto") != "resume_path",
                                        "read only with trainer.resume_mode: resume_path"),
    "trainer.default_hdfs_dir": Refused("rfthpc writes checkpoints to the run directory only; copy them elsewhere "
                                        "after the run", off),
    "trainer.del_local_ckpt_after_load": Refused("rfthpc never deletes a checkpoint it resumes from; remove it", off),
    "trainer.max_critic_ckpt_to_keep": Refused(
        "rfthpc saves actor and critic in one checkpoint (global_step_N/), kept by trainer.max_checkpoints_to_keep "
        "(veRL's max_actor_ckpt_to_keep)", same_as("trainer.max_actor_ckpt_to_keep", None)),
    "trainer.esi_redundant_time": Ignored("an elastic-instance setting; rfthpc saves when Slurm signals the end of a "
                                          "job (slurm.signal_delay_s)"),
    "trainer.ray_wait_register_center_timeout": Ignored(NO_RAY),
    "trainer.device": Ignored("the trainer runs on the GPUs Slurm gives it (or the CPU, in `rfthpc run`'s demo)"),
    "trainer.use_legacy_worker_impl": Ignored("chooses between veRL's worker implementations"),
    **{f"trainer.{k}": Ignored(SET_BY_TRINITY_VERL) for k in ("training_rollout_mode", "enable_exp_buffer",
                                                              "sync_freq")},
    "global_profiler.*": Ignored("profiling of veRL's workers"),
    "transfer_queue.*": Ignored("veRL's transfer queue; rfthpc's roles exchange data through the run directory"),
    "ray_kwargs.*": Ignored(NO_RAY),
    "synchronizer*": Ignored(SET_BY_TRINITY_VERL),
    "buffer*": Ignored(SET_BY_TRINITY_VERL),
    "enable_preview": Ignored(SET_BY_TRINITY_VERL),
}
"""veRL keys (their paths under trainer.trainer_config) that VERL_MAP does not map. Trinity-RFT's own
veRL config adds some (`synchronizer`, `buffer`, `enable_preview`, Megatron-style optimizer keys)."""


_ACTOR = "actor_rollout_ref.actor."
_USE_KL_LOSS, _KL_LOSS_TYPE = _ACTOR + "use_kl_loss", _ACTOR + "kl_loss_type"
_USE_KL_IN_REWARD, _KL_PENALTY = "algorithm.use_kl_in_reward", "algorithm.kl_penalty"


VERL_POLICY_LOSSES = {"vanilla": "ppo"}
"""veRL `policy_loss.loss_mode` -> rfthpc `policy_loss_fn` where the names differ: veRL's `vanilla`
is PPO's clipped loss (rfthpc's own `vanilla` is ROLL's plain policy gradient). Every other veRL
loss (gspo, sapo, geo_mean, clip_cov, kl_cov, dppo_tv, dppo_kl, dro, gpg, cispo) has its veRL name."""


VERL_ADVANTAGES = {"grpo_vectorized": "grpo", "rloo_vectorized": "rloo"}
"""veRL `algorithm.adv_estimator` -> rfthpc `advantage_fn` where the names differ (veRL's vectorized
variants compute the same advantages); the others (gae, grpo, rloo, reinforce_plus_plus, ...) keep theirs."""


def _kl_ctrl_type(value: Any, _given: Mapping[str, Any]) -> bool:
    if value not in ("fixed", "adaptive"):
        raise ConfigError(f"{value!r}; veRL's controllers are 'fixed' and 'adaptive'")
    return value == "adaptive"


def _older_scheduler_name(value: Any, given: Mapping[str, Any]) -> Any:
    current = given.get(_ACTOR + "optim.lr_scheduler_type")
    if current is not None and not same_text(current, value):
        raise ConfigError(f"lr_scheduler_type ({current}) and warmup_style ({value}, its older name) differ; keep "
                          "lr_scheduler_type")
    return value


# veRL switches a KL term with a flag and names its estimator in another key. The flag false means
# no term; true, the named estimator or veRL's default; an estimator named without the flag turns
# the term on. Either key gives the same answer, read with the other from `given`.
def _kl_loss_from_flag(use: Any, given: Mapping[str, Any]) -> str:
    return str(given.get(_KL_LOSS_TYPE) or "low_var_kl") if use else "none"


def _kl_loss_from_type(name: Any, given: Mapping[str, Any]) -> str:
    return "none" if given.get(_USE_KL_LOSS) is False else str(name)


def _kl_penalty_from_flag(use: Any, given: Mapping[str, Any]) -> str:
    return str(given.get(_KL_PENALTY) or "kl") if use else "none"


def _kl_penalty_from_type(name: Any, given: Mapping[str, Any]) -> str:
    return "none" if given.get(_USE_KL_IN_REWARD) is False else str(name)


# veRL trains a LoRA adapter when lora_rank > 0 (or lora_adapter_path is set) and reads its other
# LoRA settings only then; its default scale differs from Trinity-RFT's (rfthpc's): lora_alpha 16.
_VERL_LORA_RANK = "actor_rollout_ref.model.lora_rank"


VERL_LORA_ALPHA = 16


def _verl_lora(value: Any, given: Mapping[str, Any]) -> Any:
    return value if (given.get(_VERL_LORA_RANK) or 0) > 0 else None


def _verl_lora_rank(rank: Any, _given: Mapping[str, Any]) -> Any:
    return rank if rank else None  # 0: no adapter


# veRL path under trainer.trainer_config -> what it sets in rfthpc. A null value is veRL's "unset".
VERL_MAP: dict[str, Target] = {
    "actor_rollout_ref.model.path": "model.model_path",
    "actor_rollout_ref.model.custom_chat_template": "model.custom_chat_template",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "trainer.enable_gradient_checkpointing",
    _VERL_LORA_RANK: Translated("model.lora.lora_rank", _verl_lora_rank),
    "actor_rollout_ref.model.lora_alpha": Translated("model.lora.lora_alpha", _verl_lora),
    "actor_rollout_ref.model.target_modules": Translated("model.lora.target_modules", _verl_lora),
    "actor_rollout_ref.model.exclude_modules": Translated("model.lora.exclude_modules", _verl_lora),
    "actor_rollout_ref.model.lora_adapter_path": "model.lora.path",
    "actor_rollout_ref.model.use_remove_padding": "trainer.use_remove_padding",
    "actor_rollout_ref.actor.use_remove_padding": "trainer.use_remove_padding",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "trainer.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs": "trainer.ppo_epochs",
    "actor_rollout_ref.actor.use_dynamic_bsz": "trainer.use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "trainer.max_token_len_per_gpu",
    "actor_rollout_ref.actor.grad_clip": "trainer.grad_clip",
    "actor_rollout_ref.actor.optim.clip_grad": "trainer.grad_clip",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.fsdp_config.param_offload": "trainer.param_offload",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "trainer.optimizer_offload",
    "actor_rollout_ref.actor.optim.lr": "algorithm.optimizer.lr",
    "actor_rollout_ref.actor.optim.lr_warmup_steps": "algorithm.optimizer.lr_warmup_steps",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "algorithm.optimizer.lr_warmup_steps_ratio",
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "algorithm.optimizer.lr_scheduler_type",
    "actor_rollout_ref.actor.optim.warmup_style": Translated("algorithm.optimizer.lr_scheduler_type",
                                                             _older_scheduler_name),
    "actor_rollout_ref.actor.optim.min_lr_ratio": "algorithm.optimizer.min_lr_ratio",
    "actor_rollout_ref.actor.optim.weight_decay": "algorithm.optimizer.weight_decay",
    "actor_rollout_ref.actor.optim.betas": "algorithm.optimizer.betas",
    "actor_rollout_ref.actor.entropy_coeff": "algorithm.entropy_loss_fn_args.entropy_coef",
    "actor_rollout_ref.actor.loss_agg_mode": "algorithm.loss_agg_mode",
    "actor_rollout_ref.actor.loss_scale_factor": "algorithm.loss_scale_factor",
    "actor_rollout_ref.actor.policy_loss.loss_mode": FnChoice(
        "policy_loss_fn", lambda name, _given: VERL_POLICY_LOSSES.get(str(name), str(name))),
    "actor_rollout_ref.actor.clip_ratio": FnArg("policy_loss_fn", "clip_range"),
    "actor_rollout_ref.actor.clip_ratio_low": FnArg("policy_loss_fn", "clip_range_low"),
    "actor_rollout_ref.actor.clip_ratio_high": FnArg("policy_loss_fn", "clip_range_high"),
    "actor_rollout_ref.actor.clip_ratio_c": FnArg("policy_loss_fn", "clip_ratio_c"),
    "actor_rollout_ref.actor.tau_pos": FnArg("policy_loss_fn", "tau_pos"),
    "actor_rollout_ref.actor.tau_neg": FnArg("policy_loss_fn", "tau_neg"),
    **{f"actor_rollout_ref.actor.policy_loss.{verl}": FnArg("policy_loss_fn", ours)
       for verl, ours in (("clip_cov_ratio", "clip_cov_ratio"), ("clip_cov_lb", "clip_cov_lb"),
                          ("clip_cov_ub", "clip_cov_ub"), ("kl_cov_ratio", "kl_cov_ratio"),
                          ("ppo_kl_coef", "ppo_kl_coef"), ("dro_beta", "beta"))},
    _USE_KL_LOSS: FnChoice("kl_loss_fn", _kl_loss_from_flag),
    _KL_LOSS_TYPE: FnChoice("kl_loss_fn", _kl_loss_from_type),
    "actor_rollout_ref.actor.kl_loss_coef": "algorithm.kl_loss_fn_args.kl_coef",
    "algorithm.adv_estimator": FnChoice(
        "advantage_fn", lambda name, _given: VERL_ADVANTAGES.get(str(name), str(name))),
    "algorithm.norm_adv_by_std_in_grpo": FnArg("advantage_fn", "std_normalize"),
    "algorithm.gamma": FnArg("advantage_fn", "gamma"),
    "algorithm.lam": FnArg("advantage_fn", "lam"),
    _USE_KL_IN_REWARD: FnChoice("kl_penalty_fn", _kl_penalty_from_flag),
    _KL_PENALTY: FnChoice("kl_penalty_fn", _kl_penalty_from_type),
    "algorithm.kl_ctrl.type": Translated("algorithm.kl_penalty_fn_args.adaptive", _kl_ctrl_type),
    "algorithm.kl_ctrl.kl_coef": "algorithm.kl_penalty_fn_args.kl_coef",
    "algorithm.kl_ctrl.horizon": "algorithm.kl_penalty_fn_args.horizon",
    "algorithm.kl_ctrl.target_kl": "algorithm.kl_penalty_fn_args.target_kl",
    "critic.model.path": "model.critic_model_path",
    "critic.model.enable_gradient_checkpointing": "trainer.enable_gradient_checkpointing",
    "critic.model.use_remove_padding": "trainer.use_remove_padding",
    "critic.model.fsdp_config.param_offload": "trainer.param_offload",
    "critic.model.fsdp_config.optimizer_offload": "trainer.optimizer_offload",
    "critic.optim.lr": "trainer.critic_lr",
    "critic.optim.lr_warmup_steps_ratio": "trainer.critic_lr_warmup_steps_ratio",
    "critic.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
    "trainer.critic_warmup": "trainer.critic_warmup",
    "trainer.max_actor_ckpt_to_keep": "trainer.max_checkpoints_to_keep",
    "trainer.remove_previous_ckpt_in_save": Translated("trainer.max_checkpoints_to_keep",
                                                       lambda remove, _given: 1 if remove else None),
    # DAPO: dynamic sampling and the overlong penalty (veRL's DAPO recipe passes the latter as the
    # reward manager's overlong_buffer_cfg; veRL's own trainer config has it under reward_model).
    "algorithm.filter_groups.enable": "algorithm.filter_groups.enable",
    "algorithm.filter_groups.metric": "algorithm.filter_groups.metric",
    "algorithm.filter_groups.max_num_gen_batches": "algorithm.filter_groups.max_num_gen_batches",
    **{f"{prefix}.{key}": f"algorithm.overlong_buffer.{key}"
       for prefix in ("reward_model.overlong_buffer", "reward_model.reward_kwargs.overlong_buffer_cfg",
                      "reward.reward_kwargs.overlong_buffer_cfg")
       for key in ("enable", "len", "penalty_factor")},
    **{f"algorithm.rollout_correction.{k}": f"algorithm.rollout_correction.{k}" for k in (
        "rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold",
        "bypass_mode", "loss_type")},
}


def apply_verl_trainer_config(raw: dict[str, Any], problems: Problems, inherited: Mapping[str, Any] | None = None
                              ) -> None:
    """Map veRL keys in the raw config's `trainer.trainer_config` onto rfthpc fields (explicit rfthpc
    keys win); the others are ignored with a note or refused (VERL_KEYS). Used for the YAML
    and for each stage's sections (`inherited`: the run's raw config, which supplies the algorithm a
    stage does not set itself)."""
    trainer = raw.get("trainer")
    verl = trainer.get("trainer_config") if isinstance(trainer, dict) else None
    if not isinstance(verl, dict):
        return  # none, or not a mapping: typed conversion reports that
    map_verl_settings(raw, flatten(verl), problems, "trainer.trainer_config.", inherited)


def map_verl_settings(raw: dict[str, Any], flat: dict[str, Any], problems: Problems, prefix: str = "",
                      inherited: Mapping[str, Any] | None = None) -> None:
    """Set in the raw config `raw` what the veRL settings `flat` (veRL's dotted key -> value, written
    under `prefix` in messages) stand for (VERL_MAP; explicit rfthpc keys win); the keys it does not
    map are ignored with a note or refused (VERL_KEYS), any other is an unknown key. Used for
    `trainer.trainer_config` and by `rfthpc config import --from verl`, so each veRL key has one meaning."""
    reading = read_settings(flat, flat, VERL_MAP, VERL_KEYS, "veRL", prefix, problems)
    lora_default(reading, "lora_alpha", VERL_LORA_ALPHA, "veRL's default of actor_rollout_ref.model.lora_alpha")
    apply_reading(raw, reading, problems, "veRL", inherited)


def _given_on_command_line(target: str, given: set[str]) -> bool:
    """Whether the override list sets `target` itself or a mapping holding it (`--algorithm.policy_loss_fn_args`)."""
    parts = target.split(".")
    return any(f"--{'.'.join(parts[:n])}" in given for n in range(1, len(parts) + 1))


def apply_verl_overrides(cfg: Config, before: dict[str, Any], args: list[str], problems: Problems) -> bool:
    """Map the veRL settings that command-line overrides changed in `cfg.trainer.trainer_config`
    (`before`: its value from the YAML) onto rfthpc fields, unless the same override list sets
    that rfthpc field itself. True if a field was set."""
    old = flatten(before)
    now = flatten(cfg.trainer.trainer_config)
    changed = {k: v for k, v in now.items() if k not in old or old[k] != v}
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    prefix = "--trainer.trainer_config."
    reading = read_settings(changed, now, VERL_MAP, VERL_KEYS, "veRL", prefix, problems)
    targets = {t: v for t, v in reading.targets.items() if not _given_on_command_line(t, given)}
    for target, (value, where) in targets.items():
        _set_path(cfg, target, value)
        problems.map(target, value, where, "veRL")
    # A function chosen anew gets the veRL arguments it takes, from all of trainer_config; those the
    # YAML's function took and it does not are dropped (veRL's settings follow veRL's choice). The
    # whole trainer_config was answered when the YAML was read: no second note here.
    chosen_anew = {t.split(".", 1)[1] for t in targets} & {"policy_loss_fn", "advantage_fn"}
    fn_args = dict(reading.fn_args)
    for (fn_key, arg), found in read_settings(now, now, VERL_MAP, {}, "veRL", prefix, Problems("")).fn_args.items():
        if fn_key in chosen_anew:
            fn_args.setdefault((fn_key, arg), found)
    alg = cfg.algorithm
    changed_any = bool(targets)
    for (fn_key, arg), (value, where) in fn_args.items():
        target = f"algorithm.{fn_key}_args.{arg}"
        if _given_on_command_line(target, given):
            continue
        fn_args_now = getattr(alg, f"{fn_key}_args")
        if takes_argument(fn_key, chosen_function(fn_key, getattr(alg, fn_key), alg.algorithm_type), arg):
            fn_args_now[arg] = value
            problems.map(target, value, where, "veRL")
            changed_any = True
        elif fn_key in chosen_anew and arg in fn_args_now and fn_args_now[arg] == value:
            del fn_args_now[arg]
            changed_any = True
    return changed_any


def _set_path(cfg: Config, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node: Any = cfg
    for p in parents:
        node = node[p] if isinstance(node, dict) else getattr(node, p)
    if isinstance(node, dict):
        node[leaf] = value
    else:
        setattr(node, leaf, value)
