"""Sokoban as a text environment: push every box onto a target, on random levels that are solvable.

Levels come from `rfthpc.envs.sokoban_levels.generate_level` (one seed, one level), or `level` fixes one.
Observation (each turn): a line of feedback on the last action (none after reset), the legend, the grid,
and while the episode goes on the valid actions:

    Legend: # wall, _ floor, O target, X box, * box on a target, P you, + you on a target.
    #####
    #P__#
    #_X_#
    #__O#
    #####
    Valid actions: Up, Down, Left, Right. Answer with one action, e.g. <action>Up</action>.

Actions: Up, Down, Left, Right, read by `rfthpc.envs.actions.read_action`. Walking into a box pushes it
if the cell beyond it is free floor; a wall or a blocked box stops the move. Rewards as gym-sokoban's
(and ROLL's): -0.1 every step (an invalid reply too: it uses a turn), +1 for pushing a box onto a
target, -1 for pushing one off, +10 when every box is on a target, which terminates the episode (with
`success`); truncated after `max_steps` steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rfthpc.envs.actions import InvalidAction, format_hint, read_action
from rfthpc.envs.args import bad_arg, int_arg, rows_arg
from rfthpc.envs.seeds import EpisodeSeeds
from rfthpc.envs.sokoban_levels import CELLS, DIRECTIONS, Level, generate_level, parse_level

ACTIONS = ("Up", "Down", "Left", "Right")
LEGEND = "Legend: # wall, _ floor, O target, X box, * box on a target, P you, + you on a target."
_INTRO = "Sokoban: push every box X onto a target O. You can push a box but not pull it, and only one at a time."
STEP_PENALTY = -0.1
BOX_ON_TARGET = 1.0
BOX_OFF_TARGET = -1.0
SOLVED = 10.0


class Sokoban:
    """Sokoban with a text grid for observations and direction words for actions."""

    def __init__(self, *, dim_room: list[int] | tuple[int, int] = (6, 6), num_boxes: int = 1, max_steps: int = 100,
                 search_depth: int = 100, level: list[str] | None = None) -> None:
        """`dim_room`: [rows, columns] of random levels, outer walls included; `num_boxes`: boxes (and
        targets) in them; `search_depth`: steps of backward play that scatter the boxes (more: usually
        harder levels); `max_steps`: steps before the episode is truncated; `level`: a fixed level in the
        text form (see `rfthpc.envs.sokoban_levels`), played instead of random ones."""
        if (not isinstance(dim_room, (list, tuple)) or len(dim_room) != 2
                or any(isinstance(d, bool) or not isinstance(d, int) or not 5 <= d <= 20 for d in dim_room)):
            raise bad_arg("dim_room", dim_room, "must be [rows, columns], each an integer in [5, 20] "
                                                "(the outer walls included)")
        self.dim_room = (dim_room[0], dim_room[1])
        inside = (dim_room[0] - 2) * (dim_room[1] - 2)
        self.num_boxes = int_arg("num_boxes", num_boxes, 1, max(1, inside // 4))
        self.max_steps = int_arg("max_steps", max_steps, 1)
        self.search_depth = int_arg("search_depth", search_depth, 1, 100_000)
        self.level = None
        if level is not None:
            try:
                self.level = parse_level(rows_arg("level", level, CELLS))
            except ValueError as e:
                raise bad_arg("level", level, str(e)) from None
        self._seeds = EpisodeSeeds()
        self._state: Level | None = None
        self._steps = 0
        self._done = False

    def render(self) -> str:
        """The grid of the current state."""
        assert self._state is not None
        return self._state.render()

    def _observation(self, feedback: str) -> str:
        lines = [feedback] if feedback else []
        lines += [LEGEND, self.render()]
        if not self._done:
            lines.append(format_hint(ACTIONS))
        return "\n".join(lines)

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """A new episode on the level of `seed` (or of a seed drawn from the last seeded one)."""
        episode_seed = self._seeds.next(seed)
        self._state = self.level or generate_level(episode_seed, *self.dim_room, self.num_boxes, self.search_depth)
        self._steps = 0
        self._done = False
        return self._observation(_INTRO), {"level": self.render().split("\n")}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Move or push by the reply's direction word (see the module docstring)."""
        if self._state is None or self._done:
            raise RuntimeError("Sokoban.step called before reset or after the episode ended")
        self._steps += 1
        info: dict[str, Any] = {}
        reward = STEP_PENALTY
        try:
            word = read_action(action, ACTIONS)
        except InvalidAction as e:
            info["invalid_action"] = True
            feedback = f"Invalid action: {e} You did not move."
        else:
            info["action"] = word
            gained, feedback = self._move(word)
            reward += gained
        terminated = self._state.solved
        if terminated:
            reward += SOLVED
            info["success"] = True
            feedback += " Every box is on a target: solved!"
        truncated = not terminated and self._steps >= self.max_steps
        if truncated:
            info["success"] = False
            feedback += f" The step limit ({self.max_steps}) is reached."
        self._done = terminated or truncated
        return self._observation(feedback), reward, terminated, truncated, info

    def _move(self, word: str) -> tuple[float, str]:
        """Apply one move to the state: (reward for boxes moved on or off targets, feedback)."""
        state = self._state
        assert state is not None
        dr, dc = DIRECTIONS[word]
        ahead = (state.player[0] + dr, state.player[1] + dc)
        if ahead not in state.floor:
            return 0.0, f"A wall blocks {word}: you did not move."
        if ahead not in state.boxes:
            self._state = dataclasses.replace(state, player=ahead)
            return 0.0, f"You moved {word}."
        beyond = (ahead[0] + dr, ahead[1] + dc)
        if beyond not in state.floor or beyond in state.boxes:
            return 0.0, f"The box cannot be pushed {word}: you did not move."
        self._state = dataclasses.replace(state, player=ahead, boxes=state.boxes - {ahead} | {beyond})
        gained = (BOX_ON_TARGET if beyond in state.targets else 0.0) + (BOX_OFF_TARGET if ahead in state.targets else 0.0)
        return gained, f"You pushed a box {word}."

    def close(self) -> None:
        """Drop the episode's state."""
        self._state = None
