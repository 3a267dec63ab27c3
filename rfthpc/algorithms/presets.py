"""Defaults per `algorithm.algorithm_type`, following Trinity-RFT's algorithm classes.

The config loader fills every `algorithm.*` field the user left unset from the preset of the chosen
algorithm_type; `*_args` a preset gives are merged under the user's (its policy-loss arguments only
while the policy loss is the preset's own). Whether a critic, a reference model or groups are needed
follows from the functions finally named (`needs_critic`, `needs_reference`, `needs_groups`), after
the user's overrides.

Differences from Trinity-RFT: `tis` and `kimi15` are ROLL's off-policy variants made into algorithm
types here (Trinity has no such type); `kimi15` takes the group-mean baseline advantage of the
Kimi k1.5 paper (`opmd` with its default mean baseline); `remax` is veRL's estimator (Trinity has
no ReMax); `dpo` adds no KL loss unless the config names one (Trinity forces k2); `dapo` clips at
0.2 / 0.28 (the DAPO paper's clip-higher) where Trinity's dapo preset clips at 0.2 on both sides.
"""

from __future__ import annotations

from typing import Any

from rfthpc.algorithms.registry import ADVANTAGE_FNS


def needs_critic(advantage_fn: str | None) -> bool:
    """True when the advantage function reads values from a trained critic."""
    return advantage_fn is not None and ADVANTAGE_FNS.needs(advantage_fn).critic


def needs_groups(advantage_fn: str | None) -> bool:
    """True when the advantage function is group-relative (a group of one gives zero advantage)."""
    return advantage_fn is not None and ADVANTAGE_FNS.needs(advantage_fn).groups


def needs_greedy_baseline(advantage_fn: str | None) -> bool:
    """True when the advantage function compares with the reward of a greedy response (ReMax)."""
    return advantage_fn is not None and ADVANTAGE_FNS.needs(advantage_fn).greedy_baseline


def needs_reference(kl_penalty_fn: str, kl_loss_fn: str) -> bool:
    """True when a KL term against the reference model is active."""
    return kl_penalty_fn != "none" or kl_loss_fn != "none"


def _preset(
    *,
    advantage_fn: str | None,
    policy_loss_fn: str,
    repeat_times: int,
    kl_loss_fn: str = "k2",
    kl_penalty_fn: str = "none",
    entropy_loss_fn: str = "default",
    loss_agg_mode: str = "token-mean",
    **fn_args: dict[str, Any],
    # `*_fn_args`, and the option sections `filter_groups` and `overlong_buffer`.
) -> dict[str, Any]:
    return {
        "repeat_times": repeat_times,
        "advantage_fn": advantage_fn,
        "policy_loss_fn": policy_loss_fn,
        "kl_penalty_fn": kl_penalty_fn,
        "kl_loss_fn": kl_loss_fn,
        "entropy_loss_fn": entropy_loss_fn,
        "loss_agg_mode": loss_agg_mode,
        **fn_args,
    }


_GRPO = _preset(advantage_fn="grpo", policy_loss_fn="ppo", repeat_times=2)

ALGORITHM_PRESETS: dict[str, dict[str, Any]] = {
    "ppo": _preset(advantage_fn="ppo", policy_loss_fn="ppo", repeat_times=1),
    "grpo": _GRPO,
    # Trinity-RFT's GRPO with the advantage computed by the trainer, on its whole batch, instead of by
    # the explorers per task: rfthpc's trainer computes every advantage so (an advantage that reads the
    # trainer's forward pass, such as clipb, needs it).
    "grpo_verl": _GRPO,
    # Dr. GRPO (arXiv:2503.20783): neither the group's std nor each response's length divides the
    # advantage, and no KL term.
    "dr_grpo": _preset(advantage_fn="grpo", policy_loss_fn="ppo", repeat_times=2, kl_loss_fn="none",
                       loss_agg_mode="seq-mean-token-sum-norm", advantage_fn_args={"std_normalize": False}),
    # ROLL's LitePPO: group-mean, batch-std advantages and token-level aggregation.
    "lite_ppo": _preset(advantage_fn="lite_ppo", policy_loss_fn="ppo", repeat_times=2, kl_loss_fn="none"),
    # The sequence-level losses aggregate per response, as their papers and veRL's recipes do.
    "gspo": _preset(advantage_fn="grpo", policy_loss_fn="gspo", repeat_times=2, kl_loss_fn="none",
                    loss_agg_mode="seq-mean-token-mean",
                    policy_loss_fn_args={"clip_range_low": 3e-4, "clip_range_high": 4e-4}),
    "gmpo": _preset(advantage_fn="grpo", policy_loss_fn="geo_mean", repeat_times=2, kl_loss_fn="none",
                    loss_agg_mode="seq-mean-token-mean", policy_loss_fn_args={"clip_range": 0.4}),
    "sapo": _preset(advantage_fn="grpo", policy_loss_fn="sapo", repeat_times=2, kl_loss_fn="none",
                    loss_agg_mode="seq-mean-token-mean", policy_loss_fn_args={"tau_pos": 1.0, "tau_neg": 1.05}),
    # DAPO (arXiv:2503.14476): clip-higher, token-level loss, dynamic sampling on the accuracy, soft
    # overlong penalty (a buffer of a fifth of the response limit, factor 1), no KL term.
    "dapo": _preset(
        advantage_fn="grpo",
        policy_loss_fn="ppo",
        repeat_times=16,
        kl_loss_fn="none",
        loss_agg_mode="token-mean",
        policy_loss_fn_args={"clip_range_low": 0.2, "clip_range_high": 0.28},
        filter_groups={"enable": True, "metric": "acc"},
        overlong_buffer={"enable": True},
    ),
    "reinforceplusplus": _preset(advantage_fn="reinforceplusplus", policy_loss_fn="ppo", repeat_times=2),
    # REINFORCE++ with the group mean as baseline (arXiv:2501.03262 v3; veRL's rf_baseline recipe).
    "reinforce_plus_plus_baseline": _preset(advantage_fn="reinforce_plus_plus_baseline", policy_loss_fn="ppo",
                                            repeat_times=4, kl_loss_fn_args={"kl_coef": 0.001}),
    "rloo": _preset(advantage_fn="rloo", policy_loss_fn="ppo", repeat_times=2),
    # ReMax as veRL's recipe runs it (examples/remax_trainer): 4 samples per task besides the greedy
    # one, a k1 KL penalty in the reward (coefficient 0.001), no KL loss.
    "remax": _preset(
        advantage_fn="remax",
        policy_loss_fn="ppo",
        repeat_times=4,
        kl_loss_fn="none",
        kl_penalty_fn="k1",
        kl_penalty_fn_args={"kl_coef": 0.001},
    ),
    "opmd": _preset(advantage_fn="opmd", policy_loss_fn="opmd", repeat_times=2),
    "topr": _preset(advantage_fn="reinforce", policy_loss_fn="topr", repeat_times=2),
    "cispo": _preset(
        advantage_fn="grpo",
        policy_loss_fn="cispo",
        repeat_times=2,
        # Trinity-RFT's cispo loss (its preset passes no arguments): its defaults, and its mask, which drops
        # the tokens its clip range cuts in the advantage's direction (with clip_range_low 1.0, only above).
        policy_loss_fn_args={"clip_range_low": 1.0, "clip_range_high": 0.28, "use_unified_mask": True},
    ),
    "tis": _preset(advantage_fn="grpo", policy_loss_fn="tis", repeat_times=2),
    # M2PO (arXiv:2510.01161) as Trinity-RFT's preset: eight responses per task, neither a reference model
    # (no KL term) nor an entropy term; the loss reads the behaviour policy's log-probabilities.
    "m2po": _preset(advantage_fn="grpo", policy_loss_fn="m2po", repeat_times=8, kl_loss_fn="none",
                    entropy_loss_fn="none"),
    # AReaL's decoupled PPO (arXiv:2505.24298): clip against the policy at the start of the step,
    # weight by proximal / behaviour, for stale rollouts.
    "decoupled_ppo": _preset(advantage_fn="grpo", policy_loss_fn="decoupled_ppo", repeat_times=2),
    "kimi15": _preset(advantage_fn="opmd", policy_loss_fn="kimi15", repeat_times=2),
    # Trinity-RFT's AsymRE, sPPO and REC presets: neither a KL term (so no reference model; Trinity's
    # RECAlgorithm loads one all the same, which nothing reads) nor an entropy term.
    "asymre": _preset(advantage_fn="asymre", policy_loss_fn="opmd", repeat_times=2, kl_loss_fn="none",
                      entropy_loss_fn="none"),
    "sppo": _preset(advantage_fn="opmd", policy_loss_fn="sppo", repeat_times=2, kl_loss_fn="none",
                    entropy_loss_fn="none"),
    "rec": _preset(advantage_fn="rec", policy_loss_fn="rec", repeat_times=2, kl_loss_fn="none",
                   entropy_loss_fn="none"),
    # RAFT (arXiv:2304.06767): the SFT loss on the best responses of each group (the raft advantage
    # keeps them). Trinity-RFT's raft sets no group size; ranking needs several responses per task.
    "raft": _preset(advantage_fn="raft", policy_loss_fn="sft", repeat_times=4, kl_loss_fn="none",
                    entropy_loss_fn="none"),
    # On-policy distillation as Trinity-RFT's presets: the teacher's per-token log-ratio to the student
    # (on_policy_distill) or its Jensen-Shannon estimate (jsd) as the advantage, PPO's clipped loss
    # (Trinity's alternative without clipping: policy_loss_fn importance_sampling), eight samples per task.
    "on_policy_distill": _preset(advantage_fn="on_policy_distill", policy_loss_fn="ppo", repeat_times=8,
                                 kl_loss_fn="none", entropy_loss_fn="none"),
    "jsd": _preset(advantage_fn="jsd", policy_loss_fn="ppo", repeat_times=8, kl_loss_fn="none",
                   entropy_loss_fn="none", advantage_fn_args={"kl_coef": 1.0, "lambda_coef": 0.5}),
    # Trinity-RFT's MultiStepGRPOAlgorithm: each model call of an episode trained as an experience of its
    # own (env_workflow with step_wise: true), the episode's group-normalised score as every call's advantage.
    "multi_step_grpo": _preset(advantage_fn="step_wise_grpo", policy_loss_fn="ppo", repeat_times=8),
    # Trinity-RFT's GiGPOAlgorithm: the same steps, each advantage its episode's group-relative return plus its
    # return against the batch's steps taken from the same state (omega 1, gamma 1, centred only: its defaults).
    "gigpo": _preset(advantage_fn="gigpo", policy_loss_fn="ppo", repeat_times=8),
    # SFT+RL mixing as Trinity-RFT's presets: each step's batch also holds expert rows of an SFT dataset (the mix
    # sample strategy, which the policy loss selects), trained with the SFT loss weighted mu (mix_chord: on a
    # schedule, phi-weighted tokens) beside GRPO's loss on the rollouts; the entropy term on the rollouts only.
    "mix": _preset(advantage_fn="grpo", policy_loss_fn="mix", repeat_times=8, entropy_loss_fn="mix"),
    "mix_chord": _preset(advantage_fn="grpo", policy_loss_fn="mix_chord", repeat_times=8, entropy_loss_fn="mix"),
    "sft": _preset(
        advantage_fn=None,
        policy_loss_fn="sft",
        repeat_times=1,
        kl_loss_fn="none",
        entropy_loss_fn="none",
    ),
    # DPO (arXiv:2305.18290) on a preference dataset, trainer only. The loss is a mean over pairs, so
    # micro-batches are weighted by their sequences. Trinity-RFT forces a k2 KL loss on it (its way of
    # loading a reference model); here the loss itself asks for the reference, and an extra KL term is
    # added only when the config names one (the paper and TRL add none).
    "dpo": _preset(
        advantage_fn=None,
        policy_loss_fn="dpo",
        repeat_times=1,
        kl_loss_fn="none",
        entropy_loss_fn="none",
        loss_agg_mode="seq-mean-token-mean",
    ),
}
"""algorithm_type → default algorithm fields."""

DATASET_ALGORITHMS = ("sft", "dpo")
"""Algorithm types that train on a dataset (`buffer.trainer_input.experience_buffer.path`), with the
trainer alone: no explorer, no advantage, no behaviour policy."""


def trains_on_dataset(algorithm_type: str | None) -> bool:
    """True for an algorithm type that trains on a dataset instead of the explorers' experience."""
    return algorithm_type in DATASET_ALGORITHMS
