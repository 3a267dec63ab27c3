"""RL algorithm pieces as small pure functions on tensors, each selectable by name.

| config key                  | registry            | module        |
| --------------------------- | ------------------- | ------------- |
| algorithm.advantage_fn      | ADVANTAGE_FNS       | advantages    |
| algorithm.policy_loss_fn    | POLICY_LOSS_FNS     | policy_loss   |
| algorithm.kl_penalty_fn     | KL_FNS              | kl            |
| algorithm.kl_loss_fn        | KL_FNS              | kl            |
| algorithm.entropy_loss_fn   | ENTROPY_LOSS_FNS    | entropy       |
| algorithm.loss_agg_mode     | LOSS_AGG_MODES      | aggregation   |
| algorithm.algorithm_type    | ALGORITHM_PRESETS   | presets       |

No distributed code lives here: the trainer calls these on its local (micro-)batch.
"""

from rfthpc.algorithms.advantages import ADVANTAGE_FNS, AdvantageInputs, outcome_token_rewards
from rfthpc.algorithms.aggregation import LOSS_AGG_MODES, aggregate_loss, aggregation_count, masked_mean
from rfthpc.algorithms.entropy import ENTROPY_LOSS_FNS, entropy_from_logits
from rfthpc.algorithms.kl import KL_FNS, apply_kl_penalty, kl_loss, make_kl_controller
from rfthpc.algorithms.policy_loss import POLICY_LOSS_FNS, PolicyLossInputs
from rfthpc.algorithms.presets import ALGORITHM_PRESETS, needs_critic, needs_groups, needs_reference
from rfthpc.algorithms.value_loss import value_loss

__all__ = [
    "ADVANTAGE_FNS",
    "ALGORITHM_PRESETS",
    "ENTROPY_LOSS_FNS",
    "KL_FNS",
    "LOSS_AGG_MODES",
    "POLICY_LOSS_FNS",
    "AdvantageInputs",
    "PolicyLossInputs",
    "aggregate_loss",
    "aggregation_count",
    "apply_kl_penalty",
    "entropy_from_logits",
    "kl_loss",
    "make_kl_controller",
    "masked_mean",
    "needs_critic",
    "needs_groups",
    "needs_reference",
    "outcome_token_rewards",
    "value_loss",
]
