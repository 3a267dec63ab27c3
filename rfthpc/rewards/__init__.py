"""Reward functions, by name: `REWARDS.get("math_reward")`, or user code as `module:function`."""

from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.scoring import RewardOutcome, score_group

__all__ = ["REWARDS", "RewardOutcome", "score_group"]
