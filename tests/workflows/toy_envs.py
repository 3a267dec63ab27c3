"""Deterministic text environments for the multi-turn workflow's tests (user environments as
`tests.workflows.toy_envs:LineWalk`)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

MOVES = {"left": -1, "right": 1}


class LineWalk:
    """Walk from 0 to a goal on a line (the seed chooses the goal in 1..length-1) with `left`/`right`.

    Reward 1 and success on reaching the goal; `step_reward` on every other valid move; any other
    reply is an invalid action (reward 0, the observation says so). After `max_steps` steps the
    episode is truncated with success False.
    """

    def __init__(self, *, length: int = 6, max_steps: int = 20, step_reward: float = 0.0) -> None:
        self.length = length
        self.max_steps = max_steps
        self.step_reward = step_reward
        self.closed = False

    def _observation(self, head: str) -> str:
        return f"{head} You are at {self.pos}, the goal is at {self.goal}. Answer left or right."

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.goal = random.Random(seed).randint(1, self.length - 1)
        self.pos, self.steps = 0, 0
        return self._observation("Walk to the goal."), {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        move = MOVES.get(action.strip().lower())
        if move is None:
            observation, reward, info = self._observation(f"{action.strip()!r} is not a move."), 0.0, {
                "invalid_action": True}
        else:
            self.pos = min(max(self.pos + move, 0), self.length - 1)
            if self.pos == self.goal:
                return "You reached the goal.", 1.0, True, False, {"success": True, "steps": self.steps}
            observation, reward, info = self._observation("Moved."), self.step_reward, {}
        if self.steps >= self.max_steps:
            return observation, reward, False, True, {**info, "success": False}
        return observation, reward, False, False, info

    def close(self) -> None:
        self.closed = True


class Chatter:
    """`turns` turns of small talk rewarded by the reply's length (a reward random replies vary on):
    each step gives len(reply) / 100; replies of fewer than `min_chars` characters are invalid."""

    def __init__(self, *, turns: int = 3, min_chars: int = 3) -> None:
        self.turns = turns
        self.min_chars = min_chars

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.steps = 0
        return f"Talk to me ({seed}).", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        done = self.steps >= self.turns
        info: dict[str, Any] = {"invalid_action": len(action) < self.min_chars}
        if done:
            info["success"] = len(action) >= 10
        return f"You said {len(action)} characters. Go on.", len(action) / 100, done, False, info

    def close(self) -> None:
        pass
