"""FrozenLake as a text environment: gymnasium's FrozenLake-v1 on random maps, moved by direction words.

The map is drawn from the episode's seed (`generate_random_map(size, p, seed)`: always with a path from
start to goal) unless `desc` fixes it; gymnasium's own environment plays the episode, seeded with the
same seed, so one seed gives one map and, on slippery ice, one sequence of slips.

Observation (each turn): a line of feedback on the last action (none after reset), the legend, the grid
(both left out with `show_map: false`), and while the episode goes on the valid actions:

    Legend: P you, _ frozen ice, O hole, G goal.
    P___
    _O_O
    ___O
    O__G
    Valid actions: Left, Down, Right, Up. Answer with one action, e.g. <action>Left</action>.

Actions: Left, Down, Right, Up, read by `rfthpc.envs.actions.read_action` (a tagged `<action>Up</action>`,
else the reply's last direction word). An invalid reply does not move the player and uses a step.
Reward 1 on reaching the goal, else 0; terminated on the goal or in a hole; truncated after `max_steps`
steps. The step that ends an episode has `success` in its info.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map

from rfthpc.envs.actions import InvalidAction, format_hint, read_action
from rfthpc.envs.args import bad_arg, bool_arg, float_arg, int_arg, lake_map_arg
from rfthpc.envs.seeds import EpisodeSeeds

ACTIONS = ("Left", "Down", "Right", "Up")
"""In gymnasium's order: its action ids are their indices."""
_MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
_CELLS = {"S": "_", "F": "_", "H": "O", "G": "G"}
"""gymnasium's map letters → the letters shown (the start is frozen ice like any other)."""
LEGEND = "Legend: P you, _ frozen ice, O hole, G goal."
_INTRO = "You are on a frozen lake. Walk from P to the goal G without falling into a hole O."
_SLIPPERY = " The ice is slippery: a move may take you sideways instead."


def player_cell(env: FrozenLakeEnv | None) -> tuple[int, int]:
    """(row, column) where the player of a started gymnasium FrozenLake stands."""
    assert env is not None, "reset() first"
    return divmod(int(env.s), env.ncol)


def cell_letter(env: FrozenLakeEnv | None, row: int, col: int) -> str:
    """The map letter of a cell of a started gymnasium FrozenLake: S, F, H or G."""
    assert env is not None, "reset() first"
    return env.desc[row, col].decode()


class FrozenLake:
    """gymnasium's FrozenLake-v1 with a text grid for observations and direction words for actions."""

    def __init__(self, *, size: int = 4, p: float = 0.8, is_slippery: bool = False, max_steps: int = 100,
                 desc: list[str] | None = None, describe_surroundings: bool = False, show_map: bool = True) -> None:
        """`size`: side of the random maps; `p`: probability that a cell is frozen (not a hole);
        `is_slippery`: gymnasium's slippery ice (a move goes as chosen 1/3 of the time, else sideways);
        `max_steps`: steps before the episode is truncated; `desc`: a fixed map in gymnasium's letters
        (rows of S start, F frozen, H hole, G goal), used instead of random maps (then `size` and `p`
        are unused); `describe_surroundings`: each observation ends with two lines saying in words where
        the goal is from the player and what lies one move away in each direction (`The goal is 2 Down
        and 3 Right.` / `Around you: Left ice, Down hole, Right edge, Up edge.`), for a policy too small
        to read positions off the grid. The second line is last and of fixed form, so each direction's
        cell is always the same number of tokens before the reply: a tiny model learns to read it about
        twice as fast as the same words earlier in the observation (docs/agents.md); `show_map`: False leaves
        the legend and the grid out of the observations, so the policy sees the map only as those two lines
        (requires `describe_surroundings`): shorter prompts, cheaper to train a tiny model on (docs/agents.md)."""
        self.size = int_arg("size", size, 2, 32)
        # Below about 0.5, maps with a path from start to goal are so rare that drawing one can take minutes.
        self.p = float_arg("p", p, 0.5, 1.0)
        self.is_slippery = bool_arg("is_slippery", is_slippery)
        self.max_steps = int_arg("max_steps", max_steps, 1)
        self.desc = None if desc is None else lake_map_arg("desc", desc)
        self.describe_surroundings = bool_arg("describe_surroundings", describe_surroundings)
        self.show_map = bool_arg("show_map", show_map)
        if not (self.show_map or self.describe_surroundings):
            raise bad_arg("show_map", show_map, "shows the map only as its surroundings: set describe_surroundings: "
                          "true too")
        self._seeds = EpisodeSeeds()
        self._env: FrozenLakeEnv | None = None
        self._steps = 0
        self._done = False

    def render(self) -> str:
        """The grid: one line per row, `P` where the player stands."""
        assert self._env is not None
        player = player_cell(self._env)
        return "\n".join(
            "".join("P" if (r, c) == player else _CELLS[cell_letter(self._env, r, c)] for c in range(self._env.ncol))
            for r in range(self._env.nrow)
        )

    def surroundings(self) -> str:
        """The goal's offset from the player, then what lies one move away in each direction, in words
        (two lines)."""
        assert self._env is not None
        row, col = player_cell(self._env)
        names = {"_": "ice", "O": "hole", "G": "goal"}
        around = []
        for word, (dr, dc) in _MOVES.items():
            r, c = row + dr, col + dc
            inside = 0 <= r < self._env.nrow and 0 <= c < self._env.ncol
            around.append(f"{word} {names[_CELLS[cell_letter(self._env, r, c)]] if inside else 'edge'}")
        goal_row, goal_col = divmod(int(self._env.desc.ravel().tolist().index(b"G")), self._env.ncol)
        offsets = [f"{abs(d)} {word}" for d, word in ((goal_row - row, "Down" if goal_row > row else "Up"),
                                                       (goal_col - col, "Right" if goal_col > col else "Left")) if d]
        where = " and ".join(offsets) if offsets else "here"
        return f"The goal is {where}.\nAround you: {', '.join(around)}."

    def _observation(self, feedback: str) -> str:
        lines = [feedback] if feedback else []
        if self.show_map:
            lines += [LEGEND, self.render()]
        if not self._done:
            lines.append(format_hint(ACTIONS))
        if self.describe_surroundings and not self._done:
            lines.append(self.surroundings())
        return "\n".join(lines)

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """A new episode on the map of `seed` (or of a seed drawn from the last seeded one); info `map`."""
        episode_seed = self._seeds.next(seed)
        desc = self.desc or generate_random_map(size=self.size, p=self.p, seed=episode_seed)
        self._env = FrozenLakeEnv(desc=desc, is_slippery=self.is_slippery)
        self._env.reset(seed=episode_seed)
        self._steps = 0
        self._done = False
        intro = _INTRO + (_SLIPPERY if self.is_slippery else "")
        return self._observation(intro), {"map": list(desc)}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Move by the reply's direction word (see the module docstring)."""
        if self._env is None or self._done:
            raise RuntimeError("FrozenLake.step called before reset or after the episode ended")
        self._steps += 1
        info: dict[str, Any] = {}
        reward, terminated = 0.0, False
        try:
            word = read_action(action, ACTIONS)
        except InvalidAction as e:
            info["invalid_action"] = True
            feedback = f"Invalid action: {e} You did not move."
        else:
            info["action"] = word
            before = player_cell(self._env)
            _, r, terminated, _, _ = self._env.step(ACTIONS.index(word))
            reward = float(r)
            feedback = self._move_feedback(word, before, player_cell(self._env))
            if terminated:
                success = cell_letter(self._env, *player_cell(self._env)) == "G"
                info["success"] = success
                feedback += " You reached the goal!" if success else " You fell into a hole."
        truncated = not terminated and self._steps >= self.max_steps
        if truncated:
            info["success"] = False
            feedback += f" The step limit ({self.max_steps}) is reached."
        self._done = terminated or truncated
        return self._observation(feedback), reward, terminated, truncated, info

    def _move_feedback(self, word: str, before: tuple[int, int], after: tuple[int, int]) -> str:
        assert self._env is not None
        dr, dc = _MOVES[word]
        row, col = before[0] + dr, before[1] + dc
        aimed = (row, col) if 0 <= row < self._env.nrow and 0 <= col < self._env.ncol else before
        if after == aimed:
            return f"You moved {word}." if after != before else f"You are at the edge: {word} does not move you."
        slid = next((w for w, (r, c) in _MOVES.items() if (before[0] + r, before[1] + c) == after), None)
        return f"You tried {word} but slipped " + (f"{slid}." if slid else "and stayed in place.")

    def close(self) -> None:
        """Drop the episode's gymnasium environment."""
        self._env = None
