"""ROLL's algorithm settings (advantage, policy loss, KL, entropy, optimizer) as rfthpc's `algorithm`
section, for `roll_import`.

ROLL's reinforce and grpo estimators are rfthpc's `lite_ppo` with ROLL's normalisation levels, reward
clip, token whitening and advantage clip, its step-wise step_reinforce and gigpo rfthpc's step_reinforce and
roll_gigpo with the same pipeline; its PPO loss is rfthpc's `ppo` with ROLL's dual-clip bound
(1 + 2 * pg_clip, or none); its ActorPGWorker variants are the rfthpc losses of the same names.
"""

from __future__ import annotations

import math

from rfthpc.dialects.translation import ROLL_DEFAULT, Translation

NO_DUAL_CLIP = 1.0e9
"""rfthpc's PPO loss always has veRL's dual clip; a bound this large never binds (ROLL's dual_clip_loss: false)."""


_OTHER_ESTIMATOR = ("the importer translates ROLL's reinforce and grpo (rfthpc's lite_ppo with ROLL's "
                    "normalisation) and its step-wise step_reinforce and gigpo; for gae write the algorithm section "
                    "by hand (docs/configuration.md)")
_STEP_ESTIMATORS = {"step_reinforce": "step_reinforce", "gigpo": "roll_gigpo"}
"""ROLL's step-wise estimators (its agentic pipeline's) and rfthpc's advantage functions that compute them as ROLL
does (rfthpc's `gigpo` is Trinity-RFT's)."""


def translate_algorithm(t: Translation, agentic: bool) -> None:
    """The advantage, the policy loss, KL and entropy terms and the gradient clip."""
    estimator = t.get("adv_estimator", "gae")
    source = "adv_estimator" if t.has("adv_estimator") else ROLL_DEFAULT
    step_wise = estimator in _STEP_ESTIMATORS
    if step_wise and not agentic:
        t.refuse("adv_estimator", f"{estimator!r}: ROLL's step-wise estimators train the steps of agentic "
                                  "episodes (custom_envs with StepEnvManager)")
    elif estimator not in ("reinforce", "grpo", *_STEP_ESTIMATORS):
        # The other settings are still read, so that every other problem comes in the same round.
        t.refuse("adv_estimator", f"{estimator!r}: {_OTHER_ESTIMATOR}")
    t.set("algorithm.algorithm_type", "lite_ppo", source)
    if step_wise:
        t.set("algorithm.advantage_fn", _STEP_ESTIMATORS[estimator], f"{source} (the steps' discounted returns, "
                                                                     "ROLL's reward normalisation, then its advantage "
                                                                     "pipeline)")
    else:
        t.set("algorithm.advantage_fn", "lite_ppo", f"{source}: {estimator} (ROLL's reward normalisation, "
                                                     "then its advantage pipeline)")
    mean, std, where = _normalisation(t, agentic, estimator)
    args = "algorithm.advantage_fn_args"
    _step_settings(t, estimator)
    t.set(f"{args}.norm_mean_type", mean, where)
    t.set(f"{args}.norm_std_type", std, where)
    if t.get("reward_clip") is not None:
        t.set(f"{args}.reward_clip", t.get("reward_clip"), "reward_clip")
    whiten = t.get("whiten_advantages", False)
    t.set(f"{args}.whiten_advantages", bool(whiten), "whiten_advantages" if t.has("whiten_advantages")
          else ROLL_DEFAULT)
    if t.get("advantage_clip") is not None:
        t.set(f"{args}.advantage_clip", t.get("advantage_clip"), "advantage_clip")
    t.same_if("gamma", 1, "rfthpc's outcome advantages do not discount (ROLL's reinforce return with gamma 1)")
    t.note(["lambd", "value_clip", "critic_warmup"], "no effect: GAE and the critic are not used")
    t.note(["reward_pretrain"], "no effect: ROLL reads it for a critic, which reinforce/grpo do not use")
    _policy_loss(t, agentic)
    _kl_and_entropy(t)
    t.set("trainer.grad_clip", t.get("max_grad_norm", 1.0), "max_grad_norm" if t.has("max_grad_norm")
          else ROLL_DEFAULT)
    t.same_if("l2", 0.0, "rfthpc has no L2 term; use algorithm.optimizer.weight_decay")
    for key in ("whiten_rewards", "use_reward_scaling", "use_reward_norm", "add_len_reward", "error_max_len_clip",
                "difficulty_loss_weight", "length_loss_weight", "dirty_data_mask", "use_token_reward",
                "open_feedback_turn", "skip_mock_system_prompt", "parse_tool_call_parameter_to_dict"):
        t.same_if(key, False, "rfthpc has no such step; remove it or set it false")
    t.note("error_max_len_threshold", "no effect without error_max_len_clip")
    _loss_masks(t, agentic)
    t.note(["enable_reference", "enable_old_logprobs_recompute", "force_disable_old_logprobs_recompute"],
           "rfthpc decides from the configured losses whether reference and old log-probabilities are computed")
    t.note("batch_adjust_mode", "rfthpc's batches are always whole (explorers keep generating until the "
                                "trainer has its groups), so nothing is copied or deleted")
    t.note("partial_gpu_mode", "ROLL's GPU sharing between roles; rfthpc's roles are separate jobs")
    if t.has("train_infer_correction"):
        enabled = t.get("train_infer_correction.is_weight.enabled", False) or any(
            f.get("enabled") for f in t.get("train_infer_correction.filters", []) or [])
        if enabled:
            t.refuse("train_infer_correction", "ROLL's train/infer correction: use rfthpc's "
                                               "algorithm.rollout_correction (veRL's keys; docs/configuration.md)")
        else:
            t.get("train_infer_correction")
            t.same.append("train_infer_correction: off")


def _step_settings(t: Translation, estimator: str) -> None:
    """The step returns' discount (step_reinforce, gigpo) and gigpo's weights of its two terms."""
    args = "algorithm.advantage_fn_args"
    keys = {"step_reinforce": ("step_reward_gamma",),
            "gigpo": ("step_reward_gamma", "episode_reward_weight", "step_reward_weight")}.get(estimator, ())
    defaults = {"step_reward_gamma": 0.95, "episode_reward_weight": 1.0, "step_reward_weight": 1.0}
    for key in keys:
        t.set(f"{args}.{key}", t.get(key, defaults[key]), key if t.has(key) else ROLL_DEFAULT)
    unused = [k for k in defaults if k not in keys]
    t.note(unused, "no effect: used by ROLL's gigpo" + ("" if "step_reward_gamma" in keys else " and step_reinforce")
           + " only")


def _loss_masks(t: Translation, agentic: bool) -> None:
    """ROLL's RLVR masks (`get_sample_level_mask`), which its agentic pipeline does not apply: lite_ppo's."""
    args = "algorithm.advantage_fn_args"
    if agentic:
        t.note(["max_len_mask", "difficulty_mask", "difficulty_low_threshold", "difficulty_high_threshold"],
               "no effect: ROLL's agentic pipeline does not apply it")
        return
    if t.get("max_len_mask", False):
        t.set(f"{args}.max_len_mask", True, "max_len_mask (responses cut at the token limit leave the loss)")
    else:
        t.same_if("max_len_mask", False, "")
    if t.get("difficulty_mask", False):
        t.set(f"{args}.difficulty_mask", True, "difficulty_mask (groups of mean score outside the thresholds "
                                               "leave the loss)")
        for key, default in (("difficulty_low_threshold", 0.1), ("difficulty_high_threshold", 0.95)):
            t.set(f"{args}.{key}", t.get(key, default), key if t.has(key) else ROLL_DEFAULT)
    else:
        t.same_if("difficulty_mask", False, "")
        t.note(["difficulty_low_threshold", "difficulty_high_threshold"], "no effect without difficulty_mask")


def _normalisation(t: Translation, agentic: bool, estimator: str) -> tuple[str | None, str | None, str]:
    """ROLL's reward normalisation levels (group, batch or None) and the key(s) they come from."""
    if not agentic:
        if estimator == "grpo":
            t.note(["norm_mean_type", "norm_std_type"], "ROLL's grpo normalises within the group (group/group)")
            return "group", "group", "adv_estimator: grpo (group mean and std)"
        levels = [t.get(k) for k in ("norm_mean_type", "norm_std_type")]
        for key, level in zip(("norm_mean_type", "norm_std_type"), levels, strict=True):
            if level not in ("group", "batch", None):
                t.refuse(key, f"{level!r}: rfthpc normalises by group or batch statistics (not running ones)")
        source = "norm_mean_type, norm_std_type" if t.has("norm_mean_type") or t.has("norm_std_type") else \
            ROLL_DEFAULT
        return levels[0], levels[1], source
    grouping = t.get("reward_normalization.grouping", "batch")
    method = t.get("reward_normalization.method", "identity")
    mean, std = t.get("reward_normalization.norm_mean_type"), t.get("reward_normalization.norm_std_type")
    if grouping not in ("traj_group_id", "batch"):
        t.refuse("reward_normalization.grouping", f"{grouping!r}: rfthpc normalises within a task's group "
                                                  "(traj_group_id) or over the batch")
        return None, None, ""
    level = "group" if grouping == "traj_group_id" else "batch"
    derived = {"identity": (None, None), "mean": (level, None), "mean_std": (level, level),
               "asym_clip": (level, level)}.get(method, (None, None))
    given = [f"reward_normalization.{k}" for k in ("grouping", "method", "norm_mean_type", "norm_std_type")
             if t.has(f"reward_normalization.{k}")]
    return (mean or derived[0], std or derived[1],
            (", ".join(given) or ROLL_DEFAULT) + (" (traj_group_id: a task's group)" if level == "group" else ""))


_PG_WORKERS = ("roll.pipeline.rlvr.actor_pg_worker.ActorPGWorker",
               "roll.pipeline.agentic.agentic_actor_pg_worker.ActorWorker")
"""ROLL's workers whose loss is actor_train.pg_variant (RLVR's and the agentic pipeline's)."""


def _policy_loss(t: Translation, agentic: bool) -> None:
    default_worker = ("roll.pipeline.agentic.agentic_actor_worker.ActorWorker" if agentic
                      else "roll.pipeline.rlvr.actor_worker.ActorWorker")
    worker = t.get("actor_train.worker_cls") or default_worker
    variant = "ppo"
    pg_worker = worker in _PG_WORKERS
    if pg_worker:
        variant = t.get("actor_train.pg_variant", "vanilla")
        if variant not in ("vanilla", "ppo", "tis", "topr", "cispo", "kimi15"):
            t.refuse("actor_train.pg_variant", f"{variant!r}: ROLL's variants are vanilla, ppo, tis, topr, cispo, "
                                               "kimi15")
            variant = "vanilla"  # the loss settings are read anyway: every other problem comes in the same round
    elif worker != default_worker:
        t.refuse("actor_train.worker_cls", f"{worker!r}: the importer knows ROLL's ActorWorker and its policy-"
                                           f"gradient workers ({', '.join(_PG_WORKERS)})")
        variant = "vanilla"  # as above
        t.get("actor_train.pg_variant")
    else:
        t.note("actor_train.pg_variant", "no effect: ROLL reads it with a policy-gradient worker_cls only "
                                         f"({', '.join(_PG_WORKERS)})")
    source = (f"actor_train.worker_cls {'.'.join(worker.split('.')[-2:])}, actor_train.pg_variant: {variant}"
              if pg_worker else "actor_train.worker_cls: ROLL's PPO loss")
    t.set("algorithm.policy_loss_fn", variant, source)
    if t.has("pg_variant"):
        t.notes.append(f"pg_variant (top level): {t.get('pg_variant')!r} is not a ROLL setting (ROLL reads "
                       "actor_train.pg_variant); it only feeds interpolations here")
    args = "algorithm.policy_loss_fn_args"
    clip = t.get("pg_clip", 0.2)
    if variant == "ppo":
        if t.get("use_pg_clip_range", False):
            t.set(f"{args}.clip_range_low", t.get("pg_clip_low", 0.2), "pg_clip_low (use_pg_clip_range)")
            t.set(f"{args}.clip_range_high", t.get("pg_clip_high", 0.2), "pg_clip_high (use_pg_clip_range)")
        else:
            t.note(["pg_clip_low", "pg_clip_high"], "no effect without use_pg_clip_range")
        t.set(f"{args}.clip_range", clip, "pg_clip" if t.has("pg_clip") else ROLL_DEFAULT)
        if t.get("dual_clip_loss", False):
            t.set(f"{args}.clip_ratio_c", 1 + 2 * clip, "dual_clip_loss: true (ROLL's bound 1 + 2 * pg_clip)")
        else:
            t.set(f"{args}.clip_ratio_c", NO_DUAL_CLIP, "dual_clip_loss: false (a bound that never binds)"
                  if t.has("dual_clip_loss") else f"{ROLL_DEFAULT}: no dual clip (a bound that never binds)")
    else:
        t.note(["pg_clip", "dual_clip_loss", "use_pg_clip_range", "pg_clip_low", "pg_clip_high"],
               f"no effect on ROLL's {variant} loss")
    if variant == "topr":
        for ours, theirs in (("positive_weight", "topr_positive_weight"), ("negative_weight", "topr_negative_weight")):
            t.set(f"{args}.{ours}", t.get(f"actor_train.{theirs}", 1.0), f"actor_train.{theirs}"
                  if t.has(f"actor_train.{theirs}") else ROLL_DEFAULT)
        t.set(f"{args}.advantage_threshold", None, "ROLL's topr splits responses by reward > 0, not by advantage")
    else:
        t.note(["actor_train.topr_positive_weight", "actor_train.topr_negative_weight"], "no effect without topr")
    defaults = {"tis": {"lower_bound": 0.0, "upper_bound": 1.0}, "cispo": {"clip_range_low": 0.1,
                "clip_range_high": 0.1, "use_unified_mask": False}, "kimi15": {"tau": 0.1}}
    for key, value in defaults.get(variant, {}).items():
        t.set(f"{args}.{key}", value, f"{ROLL_DEFAULT} of the {variant} loss")
    mode = t.get("loss_agg_mode", "seq-mean-token-mean")
    t.set("algorithm.loss_agg_mode", mode, "loss_agg_mode" if t.has("loss_agg_mode") else ROLL_DEFAULT)
    t.same_if("importance_sampling", "token", "sequence-level ratios with PPO's clip are GSPO: set "
                                              "algorithm.policy_loss_fn: gspo by hand")
    t.same_if("rl_loss_coef", 1.0, "rfthpc does not scale the policy loss")
    t.same_if("ratio_type", "token", "rfthpc's ratios are per token")
    for key in ("postive_loss_coef", "use_topr_neg_loss_coef"):
        t.same_if(key, 0.0, "an extra loss term rfthpc does not have")
    t.same_if("use_policy_loss_type", "PPO", "use actor_train.worker_cls ActorPGWorker with pg_variant vanilla")
    t.same_if("use_topr_loss", False, "use actor_train.worker_cls ActorPGWorker with pg_variant topr")


def _kl_and_entropy(t: Translation) -> None:
    if t.get("use_kl_loss", False):
        t.set("algorithm.kl_loss_fn", "low_var_kl", "use_kl_loss: true (ROLL's k3, clamped to [-10, 10])")
        t.set("algorithm.kl_loss_fn_args.kl_coef", t.get("kl_loss_coef", 0.0), "kl_loss_coef"
              if t.has("kl_loss_coef") else ROLL_DEFAULT)
    else:
        t.set("algorithm.kl_loss_fn", "none", "use_kl_loss: false" if t.has("use_kl_loss") else ROLL_DEFAULT)
        t.note("kl_loss_coef", "no effect without use_kl_loss")
    if t.get("add_token_level_kl", False):
        t.refuse("add_token_level_kl", "true: ROLL subtracts the KL penalty per token after normalising the "
                                       "reward, rfthpc before its advantage function: use use_kl_loss instead")
    else:
        t.set("algorithm.kl_penalty_fn", "none", "add_token_level_kl: false" if t.has("add_token_level_kl")
              else ROLL_DEFAULT)
        t.note(["init_kl_coef", "kl_penalty", "target_kl", "kl_horizon"],
               "no effect on the loss without add_token_level_kl")
    coef = t.get("entropy_loss_coef", 0.0)
    if coef:
        t.set("algorithm.entropy_loss_fn", "default", "entropy_loss_coef")
        t.set("algorithm.entropy_loss_fn_args.entropy_coef", coef, "entropy_loss_coef")
    else:
        t.set("algorithm.entropy_loss_fn", "none", "entropy_loss_coef: 0" if t.has("entropy_loss_coef")
              else ROLL_DEFAULT)


_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant",
              "cosine_with_min_lr": "cosine"}


def translate_optimizer(t: Translation, updates: int) -> None:
    """actor_train.training_args: AdamW and its schedule; `updates`: ROLL's optimizer steps per pipeline step."""
    args = "actor_train.training_args"
    opt = "algorithm.optimizer"

    def src(key: str) -> str:
        return f"{args}.{key}" if t.has(f"{args}.{key}") else ROLL_DEFAULT

    lr = t.get(f"{args}.learning_rate", 5e-5)
    t.set(f"{opt}.lr", lr, src("learning_rate"))
    t.set(f"{opt}.weight_decay", t.get(f"{args}.weight_decay", 0.0), src("weight_decay"))
    t.set(f"{opt}.betas", [t.get(f"{args}.adam_beta1", 0.9), t.get(f"{args}.adam_beta2", 0.999)],
          f"{args}.adam_beta1, adam_beta2" if t.has(f"{args}.adam_beta1") or t.has(f"{args}.adam_beta2")
          else ROLL_DEFAULT)
    schedule = t.get(f"{args}.lr_scheduler_type", "linear")
    if schedule not in _SCHEDULES:
        t.refuse(f"{args}.lr_scheduler_type", f"{schedule!r}: rfthpc's schedules are constant, cosine and linear")
    else:
        t.set(f"{opt}.lr_scheduler_type", _SCHEDULES[schedule], src("lr_scheduler_type") +
              (" (ROLL's Hugging Face / Megatron linear decay to 0)" if schedule == "linear" else ""))
    kwargs = t.get(f"{args}.lr_scheduler_kwargs") or {}
    floor = kwargs.pop("min_lr", None)
    if floor is not None:
        t.set(f"{opt}.min_lr_ratio", floor / lr, f"{args}.lr_scheduler_kwargs.min_lr / learning_rate")
    elif "min_lr_rate" in kwargs:
        t.set(f"{opt}.min_lr_ratio", kwargs.pop("min_lr_rate"), f"{args}.lr_scheduler_kwargs.min_lr_rate")
    elif schedule != "constant":
        t.set(f"{opt}.min_lr_ratio", 0.0, f"{ROLL_DEFAULT}: decay to 0")
    for key in kwargs:
        t.refuse(f"{args}.lr_scheduler_kwargs.{key}", "rfthpc's schedules take a floor (min_lr) only")
    warmup = t.get(f"{args}.warmup_steps", 0)
    if warmup:
        steps = warmup / updates
        t.set(f"{opt}.lr_warmup_steps", math.ceil(steps), f"{args}.warmup_steps" + (
            f" ({warmup} optimizer steps = {steps:g} trainer steps of {updates} updates)" if updates > 1 else ""))
        if steps != int(steps):
            t.notes.append(f"{args}.warmup_steps: {warmup} optimizer steps are {steps:g} trainer steps; rfthpc's "
                           "schedule moves per trainer step, so warm-up takes "
                           f"{math.ceil(steps)}")
    elif t.get(f"{args}.warmup_ratio", 0.0):
        t.set(f"{opt}.lr_warmup_steps_ratio", t.get(f"{args}.warmup_ratio"), f"{args}.warmup_ratio")
    else:
        t.set(f"{opt}.lr_warmup_steps", 0, src("warmup_steps"))
    t.note(f"{args}.num_train_epochs", "no effect: ROLL's pipeline runs max_steps steps, cycling through the data")
    t.note([f"{args}.max_steps", f"{args}.seed", f"{args}.data_seed", f"{args}.output_dir"],
           "ROLL overwrites it from the top-level settings")
    t.note([f"{args}.fp16", f"{args}.bf16", f"{args}.tf32", f"{args}.dataloader_num_workers"],
           "rfthpc's precision follows model.dtype")
    if t.has(f"{args}.save_hf_model"):
        t.set("trainer.save_hf_checkpoint", "always" if t.get(f"{args}.save_hf_model") else "never",
              f"{args}.save_hf_model")
