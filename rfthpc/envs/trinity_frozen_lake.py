"""FrozenLake as Trinity-RFT's `frozen_lake_workflow` plays it (rfthpc's `frozen_lake_workflow` runs it).

Trinity's maps, observations, actions and rewards, so that results compare with Trinity's:

- **Map.** Drawn from the episode's seed as Trinity draws it (`trinity_random_map`): holes with
  probability 1 - p, then a random start and a random goal, redrawn until Trinity's path check
  passes; or `desc`, a fixed map in gymnasium's letters.
- **Observation** (the user turn), with `k` the steps taken so far:

      Current Observation (k):
      _P__
      _O_O
      ___O
      O__G
      You have not achieved the goal, P has not reached G yet. Please give the next action.
      The maximum number of steps remaining is N.

  (the first line ends with a space, as Trinity's), with Trinity's invalid-action line before the last
  line when the last step left the player where it was (an unreadable reply, or a move into the edge).
- **Actions.** The last span in triple backticks holds the action: a direction (```Left```, any case)
  or its number (1 Left, 2 Down, 3 Right, 4 Up); anything else is invalid and uses a step.
- **Reward** 1 on reaching the goal, else 0; terminated on the goal or in a hole; truncated after
  `max_steps` steps.

The map is the seed's; slips on slippery ice are not: gymnasium draws them unseeded, as in Trinity,
so the episodes of a group (one seed) slip independently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
from gymnasium.utils import seeding

from rfthpc.envs.args import bad_arg, bool_arg, float_arg, int_arg, lake_map_arg
from rfthpc.envs.frozen_lake import cell_letter, player_cell
from rfthpc.envs.seeds import EpisodeSeeds

ACTIONS = ("Left", "Down", "Right", "Up")
"""In gymnasium's order (its action ids are the indices); Trinity numbers them 1 to 4 in this order."""
_FENCED = re.compile(r"```(.*?)```", re.DOTALL)
_CELLS = {"S": "_", "F": "_", "H": "O", "G": "G"}
_ON_HOLE, _ON_GOAL = "X", "√"
"""Trinity's marks for the player in a hole or on the goal (only in the observation that ends an episode)."""
_GOAL_NOT_REACHED = "You have not achieved the goal, P has not reached G yet. Please give the next action."
INVALID_FEEDBACK = (
    "Your last response is invalid. Your position didn't change at all. You may need to recheck your thinking "
    "process, action outputted, and the format of response. Remember, you should only output the NEXT ACTION at "
    "each interation in the ``` ```. For example, if you want to move up, you should output ```Up```."
)
"""Trinity's line after a step that left the player in place (its wording, typo included: policies are
trained on it)."""
_MOVES = ((1, 0), (0, 1), (-1, 0), (0, -1))
"""Down, Right, Up, Left: the order Trinity's path check visits neighbours in."""


def read_action(reply: str) -> str | None:
    """The action of `reply` (one of ACTIONS), read as Trinity reads it: the content of the last
    triple-backtick span, stripped, as a direction in any case or its number 1-4; None if invalid."""
    spans = _FENCED.findall(reply)
    if not spans:
        return None
    text = spans[-1].strip().lower()
    by_name = {a.lower(): a for a in ACTIONS}
    if text in by_name:
        return by_name[text]
    # Trinity accepts any digits int() reads ("03" is Right); isdecimal is what int() reads.
    if text.isdecimal() and 1 <= int(text) <= len(ACTIONS):
        return ACTIONS[int(text) - 1]
    return None


def _goal_within(board: list[list[str]], max_steps: int) -> bool:
    """Trinity's path check, kept as it is because it decides which draws become maps: a depth-first
    search from the start through non-hole cells, each cell expanded once with the step count it was
    first reached at, which passes when a cell reached within `max_steps` steps is next to the goal. So
    it accepts a goal `max_steps` + 1 moves away, and may miss a short path it first reached the long way."""
    size = len(board)
    start = next((r, c) for r, row in enumerate(board) for c, cell in enumerate(row) if cell == "S")
    frontier = [(*start, 0)]
    expanded: set[tuple[int, int]] = set()
    while frontier:
        row, col, steps = frontier.pop()
        if steps > max_steps or (row, col) in expanded:
            continue
        expanded.add((row, col))
        for dr, dc in _MOVES:
            r, c = row + dr, col + dc
            if not (0 <= r < size and 0 <= c < size):
                continue
            if board[r][c] == "G":
                return True
            if board[r][c] != "H":
                frontier.append((r, c, steps + 1))
    return False


def trinity_random_map(size: int, p: float, seed: int, max_steps: int) -> list[str]:
    """The map Trinity-RFT draws for (`size`, `p`, `seed`, `max_steps`), in gymnasium's letters: with
    gymnasium's seeded generator, each cell frozen with probability `p` (else a hole), then a start and
    a different goal at random, the whole drawn again until `_goal_within(max_steps)` passes. The same
    calls in the same order as Trinity's, so each seed gives Trinity's map."""
    rng, _ = seeding.np_random(seed)
    p = min(1.0, p)
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p]).tolist()
        while True:
            start = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            goal = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            if start != goal:
                break
        board[start[0]][start[1]] = "S"
        board[goal[0]][goal[1]] = "G"
        if _goal_within(board, max_steps):
            return ["".join(row) for row in board]


class TrinityFrozenLake:
    """gymnasium's FrozenLake-v1 with Trinity-RFT's maps, observations and action format (module doc)."""

    def __init__(self, *, size: int | None = None, p: float = 0.8, max_steps: int = 10, is_slippery: bool = False,
                 desc: list[str] | None = None) -> None:
        """`size`: side of the random maps (needed unless `desc` is given: Trinity's default, 1, draws
        no map); `p`: probability that a cell is frozen; `max_steps`: steps before the episode is
        truncated, and the path length Trinity's check allows on a map; `is_slippery`: gymnasium's
        slippery ice; `desc`: a fixed map in gymnasium's letters (then `size` and `p` are unused)."""
        self.desc = None if desc is None else lake_map_arg("desc", desc)
        if self.desc is None and size is None:
            raise bad_arg("size", size, "must be given (the side of the random maps) unless desc fixes the map")
        self.size = None if size is None else int_arg("size", size, 2, 32)
        self.p = float_arg("p", p, 0.0, 1.0)
        self.max_steps = int_arg("max_steps", max_steps, 1)
        self.is_slippery = bool_arg("is_slippery", is_slippery)
        self._seeds = EpisodeSeeds()
        self._env: FrozenLakeEnv | None = None
        self._steps = 0
        self._done = False

    def render(self) -> str:
        """The grid as Trinity renders it: one line per row, `P` where the player stands (`X` in a hole,
        `√` on the goal), `_` frozen ice (the start too), `O` a hole, `G` the goal."""
        assert self._env is not None
        player = player_cell(self._env)
        marks = {"H": _ON_HOLE, "G": _ON_GOAL}
        return "\n".join(
            "".join(marks.get(cell_letter(self._env, r, c), "P") if (r, c) == player else _CELLS[cell_letter(self._env, r, c)]
                    for c in range(self._env.ncol))
            for r in range(self._env.nrow)
        )

    def _observation(self, stayed: bool) -> str:
        lines = [f"Current Observation ({self._steps}): ", self.render(), _GOAL_NOT_REACHED]
        if stayed:
            lines.append(INVALID_FEEDBACK)
        if self.max_steps > self._steps:
            lines.append(f"The maximum number of steps remaining is {self.max_steps - self._steps}.")
        return "\n".join(lines)

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """A new episode on the map of `seed` (or of a seed drawn from the last seeded one); info `map`."""
        episode_seed = self._seeds.next(seed)
        if self.desc is not None:
            desc = self.desc
        else:
            assert self.size is not None, "__init__ requires a size without desc"
            desc = trinity_random_map(self.size, self.p, episode_seed, self.max_steps)
        self._env = FrozenLakeEnv(desc=desc, is_slippery=self.is_slippery)
        self._env.reset()  # unseeded: slips are drawn as in Trinity (module doc)
        self._steps = 0
        self._done = False
        return self._observation(stayed=False), {"map": list(desc)}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Move by the reply's action (module doc); an invalid one leaves the player in place."""
        if self._env is None or self._done:
            raise RuntimeError("TrinityFrozenLake.step called before reset or after the episode ended")
        self._steps += 1
        before = player_cell(self._env)
        word = read_action(action)
        info: dict[str, Any] = {}
        reward, terminated = 0.0, False
        if word is None:
            info["invalid_action"] = True
        else:
            info["action"] = word
            _, r, terminated, _, _ = self._env.step(ACTIONS.index(word))
            reward = float(r)
        truncated = not terminated and self._steps >= self.max_steps
        if terminated or truncated:
            info["success"] = cell_letter(self._env, *player_cell(self._env)) == "G"
        self._done = terminated or truncated
        return self._observation(stayed=player_cell(self._env) == before), reward, terminated, truncated, info

    def close(self) -> None:
        """Drop the episode's gymnasium environment."""
        self._env = None
