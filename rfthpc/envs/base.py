"""What an environment is to rfthpc: gymnasium's interface with text observations and actions.

A multi-turn workflow plays one episode per response: it resets the environment with the task's
seed, shows the observation to the policy, passes the policy's reply to `step` as the action, and
repeats until the episode is terminated or truncated (or a limit of the workflow ends it). The
environment never sees token ids; the workflow keeps the exact tokens the policy generated.

Conventions of the `info` dicts (the workflow and the explorer's metrics read them):
- `step` info `"invalid_action": True` when the action could not be parsed or is not allowed (the
  observation then says why, so the policy can correct itself);
- `"success": True/False` in the info of the step that ends an episode, when the task has a notion
  of success (the episode's success rate is reported from it);
- anything else is kept in the experience's info for the user.

An environment is constructed with keyword arguments only: the taskset's `workflow_args.env_args`
overridden by the task row's `env_args` column, so tasks stay rows of a taskset (seeds, map sizes)
and claims, refill, epochs and exactly-once work as for any task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class TextEnv(Protocol):
    """An environment whose observations and actions are text."""

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode (the same seed gives the same episode); return (observation, info)."""
        ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply the policy's reply; return (observation, reward, terminated, truncated, info)."""
        ...

    def close(self) -> None:
        """Release what the environment holds."""
        ...
