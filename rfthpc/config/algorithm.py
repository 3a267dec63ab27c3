"""`algorithm` section: which RL algorithm, its functions and the optimizer (Trinity-RFT's shape)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional


@dataclass
class OptimizerConfig:
    """AdamW settings (veRL's `actor_rollout_ref.actor.optim`)."""

    lr: float = 1e-6
    """Peak learning rate."""
    lr_warmup_steps: int = -1
    """Linear warm-up steps; -1 derives them from `lr_warmup_steps_ratio`."""
    lr_warmup_steps_ratio: float = 0.0
    """Warm-up length as a fraction of the total trainer steps (used when `lr_warmup_steps` < 0)."""
    min_lr_ratio: float = 0.0
    """Floor of the cosine and linear schedules, as a fraction of `lr`."""
    lr_scheduler_type: Literal["constant", "cosine", "linear"] = "constant"
    """Schedule after warm-up: hold `lr` (constant) or decay to `min_lr_ratio * lr` over the stage's
    remaining steps along a half cosine (cosine) or a straight line (linear, ROLL's default); both need
    `buffer.total_steps`. veRL's and Trinity-RFT's current name;
    their older name `warmup_style` is read as this key (both given and different: an error)."""
    optimizer_type: Literal["adamw"] = "adamw"
    """Optimizer; rfthpc trains with AdamW (Trinity-RFT's `adam` and veRL's `AdamW` name the same one and are
    read as this)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    eps: float = 1e-8
    """AdamW epsilon."""


@dataclass
class FilterGroupsConfig:
    """Dynamic sampling (DAPO; veRL's `algorithm.filter_groups`): a group whose responses all score the
    same teaches nothing, so the explorer does not commit it and explores a fresh task in its place.
    Unset keys come from the `algorithm_type` preset, else the defaults below."""

    enable: bool | None = None
    """Filter groups without contrast (default off; on in the `dapo` preset). Needs repeat_times > 1."""
    metric: str | None = None
    """What must vary within a group: `reward` (default: the reward trained on, overlong penalty included),
    `acc` or `score` (the reward function's value before the overlong penalty, or its component of that
    name), or the name of another component of the reward function."""
    max_num_gen_batches: int | None = None
    """0 (default): no limit. N > 0: an explorer that explored N batches (its share of a trainer batch
    each) without keeping one batch's worth of groups stops with an error (the data is too easy or too hard)."""


@dataclass
class OverlongBufferConfig:
    """DAPO's soft overlong penalty on the reward (veRL's `reward_model.overlong_buffer`): a response of
    L tokens gets `penalty_factor * max(-1, min(0, (L_max - len - L) / len))` added to its reward, with
    L_max = `model.max_response_tokens`. Unset keys come from the `algorithm_type` preset, else the defaults below."""

    enable: bool | None = None
    """Add the penalty (default off; on in the `dapo` preset)."""
    len: int | None = None
    """The buffer L_cache in tokens: the penalty grows from 0 to penalty_factor over the last `len` tokens
    before the limit (default: a fifth of model.max_response_tokens, the DAPO paper's 4096 of 20480)."""
    penalty_factor: float | None = None
    """The penalty at the limit (default 1.0)."""


@dataclass
class RolloutCorrectionConfig:
    """Importance weights and rejection for stale or mismatched rollouts: veRL 0.9.1's
    `algorithm.rollout_correction`, same keys and meanings (defaults: off)."""

    rollout_is: Literal["token", "sequence"] | None = None
    """Importance weights pi / mu per token, or per response (product of its tokens' ratios); null: none."""
    rollout_is_threshold: str = "2.0"
    """A number u: weights truncated at u (TIS); "lo_hi" (e.g. "0.5_5.0"): weights outside [lo, hi] set to 0 (IcePop)."""
    rollout_is_batch_normalize: bool = False
    """Divide the weights by their mean over the batch (tokens, or responses at sequence level)."""
    rollout_rs: str | None = None
    """Rejection rules, comma-separated: token_k1/k2/k3, seq_sum_k1/k2/k3, seq_mean_k1/k2/k3 (seq_mean_k1:
    geometric-mean rejection), seq_max_k2/k3; rejected tokens or responses leave the loss. null: none."""
    rollout_rs_threshold: str | None = None
    """One threshold per rule (or one for all), comma-separated: "lo_hi" for k1 rules (ratio bounds), an upper
    bound for k2/k3 rules."""
    bypass_mode: bool = False
    """The loss compares directly with the behaviour policy (no recomputed proximal policy)."""
    loss_type: Literal["ppo_clip", "reinforce"] = "ppo_clip"
    """With bypass_mode: ppo_clip trains policy loss `ppo`, reinforce trains `bypass_mode` (REINFORCE x IS weights)."""


@dataclass
class AlgorithmConfig:
    """The RL algorithm. Unset functions come from the `algorithm_type` preset."""

    algorithm_type: str = "ppo"
    """Preset that fills unset functions: ppo, grpo, grpo_verl, dr_grpo, dapo, gspo, gmpo, sapo, lite_ppo,
    rloo, remax, reinforceplusplus, reinforce_plus_plus_baseline, opmd, asymre, sppo, rec, cispo, tis, m2po,
    topr, kimi15, decoupled_ppo, raft, on_policy_distill, jsd, mix, mix_chord (RL with expert SFT rows), sft,
    dpo (trainer only, on a preference dataset); docs/algorithms.md."""
    repeat_times: Optional[int] = None
    """Responses sampled per task (GRPO group size; veRL's `actor_rollout_ref.rollout.n`); defaults to the preset's."""
    sample_strategy: Optional[Literal["default", "mix"]] = None
    """How the trainer samples experience: `default`, in commit order from the store (Trinity-RFT's `warmup`,
    which its saved configs carry, is read as this: rfthpc's SFT warm-up is a `stages:` entry); `mix`, each
    step's batch also holds expert rows of an SFT dataset (`buffer.trainer_input.auxiliary_buffers`) for a
    policy loss that trains them (mix, mix_chord). Defaults to `mix` for such a loss, else `default`."""
    sample_strategy_args: dict[str, Any] = field(default_factory=dict)
    """Arguments of the `mix` strategy: `expert_data_ratio` (0.5: the share of `buffer.train_batch_size` that is
    expert rows, ceil'd), `sft_dataset_name` (`sft_dataset`: the auxiliary buffer read)."""
    advantage_fn: Optional[str] = None
    """Advantage estimator (grpo, rloo, opmd, asymre, rec, opo, gpg, grpo_passk, gdpo, lite_ppo, remax,
    reinforce, reinforceplusplus, reinforce_plus_plus_baseline, optimal_token_baseline, clipb, raft,
    on_policy_distill, jsd, step_wise_grpo, step_reinforce, gigpo, roll_gigpo (steps of multi-turn episodes), ppo/gae;
    docs/algorithms.md) or `module:function`."""
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the advantage function (e.g. gamma, lam, std_normalize)."""
    policy_loss_fn: Optional[str] = None
    """Policy loss (ppo, pg/vanilla/gpg, gspo, geo_mean/gmpo, sapo, clip_cov, kl_cov, dppo_tv, dppo_kl, dro,
    cispo, tis, topr, kimi15, opmd, sppo, rec, m2po, decoupled_ppo, bypass_mode, importance_sampling, mix, mix_chord,
    sft, dpo; docs/algorithms.md) or `module:function`."""
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the policy loss (e.g. clip_range, clip_ratio_c)."""
    kl_penalty_fn: Optional[str] = None
    """KL penalty in the reward: none, k1, k2, k3/low_var_kl, abs, or k1+, k3+, abs+ (k2's gradient)."""
    kl_penalty_fn_args: dict[str, Any] = field(default_factory=dict)
    """Arguments of the KL penalty (kl_coef; adaptive: target_kl, horizon)."""
    kl_loss_fn: Optional[str] = None
    """KL loss against the frozen reference model: none, k1, k2, k3/low_var_kl, abs, or k1+, k3+, abs+
    (the estimator's value with k2's gradient)."""
    kl_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    """Arguments of the KL loss (kl_coef)."""
    entropy_loss_fn: Optional[str] = None
    """Entropy bonus: default or none."""
    entropy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    """Arguments of the entropy bonus (entropy_coef)."""
    loss_agg_mode: Optional[str] = None
    """Loss aggregation: token-mean, token-sum, seq-mean-token-mean, seq-mean-token-sum,
    seq-mean-token-sum-norm (veRL's: divides by the responses and L), token-sum-norm (Trinity-RFT's
    seq-mean-token-sum-norm: divides by L only)."""
    loss_scale_factor: Optional[float] = None
    """The constant length L of seq-mean-token-sum-norm and token-sum-norm (veRL's `loss_scale_factor`);
    defaults to `model.max_response_tokens`. Set only with those modes."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """Optimizer of the policy."""
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    """Dynamic sampling: groups without contrast are not trained; explorers explore fresh tasks instead."""
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    """Soft overlong penalty added to each response's reward by the explorer."""
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    """Rollout correction for stale or mismatched rollouts (veRL's keys; docs/configuration.md)."""
