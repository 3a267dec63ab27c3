"""What each `algorithm.*` key may name: the built-in functions, by name, and the loss modes.

The names are declared here, apart from the functions, so that a config is checked without
importing torch (seconds on a login node): a registry imports a function's module only when the
function is used, and checks its arguments from the module's source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rfthpc.registry import Registry

if TYPE_CHECKING:
    from rfthpc.algorithms.advantages import AdvantageFn
    from rfthpc.algorithms.entropy import EntropyLossFn
    from rfthpc.algorithms.kl import KLFn
    from rfthpc.algorithms.policy_loss import PolicyLossFn

ADVANTAGE_FNS: Registry[AdvantageFn] = Registry("advantage function", "algorithm.advantage_fn", {
    "grpo": "rfthpc.algorithms.advantages:grpo",
    "rloo": "rfthpc.algorithms.advantages:rloo",
    "opmd": "rfthpc.algorithms.advantages:opmd",
    "reinforce": "rfthpc.algorithms.advantages:reinforce",
    "reinforceplusplus": "rfthpc.algorithms.advantages:reinforce_plus_plus",
    "reinforce++": "rfthpc.algorithms.advantages:reinforce_plus_plus",
    "reinforce_plus_plus": "rfthpc.algorithms.advantages:reinforce_plus_plus",
    "ppo": "rfthpc.algorithms.advantages:ppo",
    "gae": "rfthpc.algorithms.advantages:ppo",
})

POLICY_LOSS_FNS: Registry[PolicyLossFn] = Registry("policy loss", "algorithm.policy_loss_fn", {
    "ppo": "rfthpc.algorithms.policy_loss:ppo",
    "pg": "rfthpc.algorithms.policy_loss:pg",
    "vanilla": "rfthpc.algorithms.policy_loss:pg",
    "sft": "rfthpc.algorithms.policy_loss:sft",
    "opmd": "rfthpc.algorithms.policy_loss:opmd",
    "tis": "rfthpc.algorithms.policy_loss:tis",
    "topr": "rfthpc.algorithms.policy_loss:topr",
    "cispo": "rfthpc.algorithms.policy_loss:cispo",
    "kimi15": "rfthpc.algorithms.policy_loss:kimi15",
})

KL_FNS: Registry[KLFn] = Registry("KL estimator", "algorithm.kl_loss_fn / algorithm.kl_penalty_fn", {
    "none": "rfthpc.algorithms.kl:kl_none",
    "k1": "rfthpc.algorithms.kl:kl_k1",
    "kl": "rfthpc.algorithms.kl:kl_k1",
    "k2": "rfthpc.algorithms.kl:kl_k2",
    "mse": "rfthpc.algorithms.kl:kl_k2",
    "k3": "rfthpc.algorithms.kl:kl_k3",
    "low_var_kl": "rfthpc.algorithms.kl:kl_k3",
    "abs": "rfthpc.algorithms.kl:kl_abs",
})

ENTROPY_LOSS_FNS: Registry[EntropyLossFn] = Registry("entropy loss", "algorithm.entropy_loss_fn", {
    "default": "rfthpc.algorithms.entropy:entropy_bonus",
    "basic": "rfthpc.algorithms.entropy:entropy_bonus",
    "none": "rfthpc.algorithms.entropy:no_entropy_bonus",
})

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
"""`algorithm.loss_agg_mode`: how token losses become one number (see `aggregation.aggregate_loss`)."""
