"""The reward-function registry: `REWARDS.get("math_reward")`, or user code as `module:function`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rfthpc.registry import Registry

REWARDS: Registry[Callable[..., Any]] = Registry("reward function", "buffer.explorer_input.default_reward_fn_type", {
    "accuracy_reward": "rfthpc.rewards.math_reward:accuracy_reward",
    "math_reward": "rfthpc.rewards.math_reward:accuracy_reward",
    "math_boxed_reward": "rfthpc.rewards.math_reward:boxed_accuracy_reward",
    "format_reward": "rfthpc.rewards.format_reward:format_reward",
    "countdown_reward": "rfthpc.rewards.countdown_reward:countdown_reward",
    "math_dapo_reward": "rfthpc.rewards.math_reward:math_dapo_reward",
    "rlcr_reward": "rfthpc.rewards.rlcr_reward:rlcr_reward",
    "toolcall_reward": "rfthpc.rewards.toolcall_reward:toolcall_reward",
    "verl_reward": "rfthpc.rewards.verl_reward:verl_reward",
})
