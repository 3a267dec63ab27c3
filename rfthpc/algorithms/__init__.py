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

The registries and the names they accept live in `registry` (built-in name → function); the
critic's value loss in `critic`.

No distributed code lives here: the trainer calls these on its local (micro-)batch.

Importing this package does not import torch: the registries, presets and loss modes are plain
data, so a config is validated (on a login node, by every CLI call) in a fraction of a second. The
tensor functions and input classes below are imported from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rfthpc.algorithms.kl_control import kl_controller, kl_loss_coef, make_kl_controller
from rfthpc.algorithms.presets import (
    ALGORITHM_PRESETS,
    needs_critic,
    needs_greedy_baseline,
    needs_groups,
    needs_reference,
    trains_on_dataset,
)
from rfthpc.algorithms.registry import ADVANTAGE_FNS, ENTROPY_LOSS_FNS, KL_FNS, LOSS_AGG_MODES, POLICY_LOSS_FNS

if TYPE_CHECKING:
    from rfthpc.algorithms.advantages import AdvantageInputs, outcome_token_rewards
    from rfthpc.algorithms.aggregation import aggregate_loss, aggregation_count, averages, loss_scale, masked_mean
    from rfthpc.algorithms.critic import value_loss
    from rfthpc.algorithms.entropy import entropy_from_logits
    from rfthpc.algorithms.kl import apply_kl_penalty, kl_loss
    from rfthpc.algorithms.policy_loss import PolicyLossInputs

_TORCH_EXPORTS = {
    "AdvantageInputs": "advantages",
    "outcome_token_rewards": "advantages",
    "aggregate_loss": "aggregation",
    "aggregation_count": "aggregation",
    "averages": "aggregation",
    "loss_scale": "aggregation",
    "masked_mean": "aggregation",
    "value_loss": "critic",
    "entropy_from_logits": "entropy",
    "apply_kl_penalty": "kl",
    "kl_loss": "kl",
    "PolicyLossInputs": "policy_loss",
}
"""Exported names that need torch → the submodule defining them (imported on first access)."""


def __getattr__(name: str) -> Any:
    """Import a tensor function or input class from its submodule when it is first used."""
    module = _TORCH_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


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
    "averages",
    "entropy_from_logits",
    "kl_controller",
    "kl_loss",
    "kl_loss_coef",
    "loss_scale",
    "make_kl_controller",
    "masked_mean",
    "needs_critic",
    "needs_greedy_baseline",
    "needs_groups",
    "needs_reference",
    "outcome_token_rewards",
    "trains_on_dataset",
    "value_loss",
]
