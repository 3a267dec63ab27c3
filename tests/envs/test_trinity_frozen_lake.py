"""`trinity_frozen_lake`: Trinity-RFT's FrozenLake maps (per seed, within its path check), its
observation text, its action format and its rewards."""

from __future__ import annotations

from collections import deque

import pytest

from rfthpc.envs.trinity_frozen_lake import INVALID_FEEDBACK, TrinityFrozenLake, read_action, trinity_random_map
from rfthpc.errors import ConfigError

MAP = ["SFFF", "FHFH", "FFFH", "HFFG"]
GOAL_LINE = "You have not achieved the goal, P has not reached G yet. Please give the next action."


def shortest_path(rows: list[str]) -> int | None:
    """Moves from S to the nearest G avoiding holes (breadth-first); None if there is no path."""
    n, m = len(rows), len(rows[0])
    start = next((r, c) for r in range(n) for c in range(m) if rows[r][c] == "S")
    queue, seen = deque([(start, 0)]), {start}
    while queue:
        (r, c), d = queue.popleft()
        if rows[r][c] == "G":
            return d
        for dr, dc in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            nxt = (r + dr, c + dc)
            if 0 <= nxt[0] < n and 0 <= nxt[1] < m and nxt not in seen and rows[nxt[0]][nxt[1]] != "H":
                seen.add(nxt)
                queue.append((nxt, d + 1))
    return None


@pytest.mark.parametrize(("size", "p", "seed", "max_steps", "expected"), [
    # Trinity-RFT's generate_random_map gives these maps for these arguments.
    (4, 0.8, 42, 10, ["FFSF", "FHFF", "FFFH", "GHFF"]),
    (2, 0.8, 0, 10, ["FS", "FG"]),
    (6, 0.7, 123, 10, ["FFFFFH", "HFHHFF", "HFHFSG", "HFFFFF", "FFFHHF", "HHFHHF"]),
    (9, 0.6, 7, 10, ["HHHFFHFHH", "FFFFFFFHH", "HHFFGFFFF", "HHFFFFFHF", "FFHFFHFHH", "HFFFHFFFF", "FFHFHFHHS",
                     "FFFFFHFHF", "HHFHHHFFF"]),
])
def test_a_seed_draws_trinitys_map(size: int, p: float, seed: int, max_steps: int, expected: list[str]) -> None:
    assert trinity_random_map(size, p, seed, max_steps) == expected
    assert trinity_random_map(size, p, seed, max_steps) == expected, "the same seed, the same map"


def test_maps_are_solvable_within_trinitys_path_check() -> None:
    """Trinity's check passes a goal at most max_steps + 1 moves away (its depth-first search looks one
    move past a cell reached within max_steps): none needs more; at max_steps 10 (the default) nearly
    every map needs at most max_steps, at 3 about one in five needs 4."""
    lengths = {max_steps: [shortest_path(trinity_random_map(2 + seed % 8, 0.6 + 0.25 * (seed % 5) / 4, seed,
                                                            max_steps)) for seed in range(300)]
               for max_steps in (3, 10)}
    for max_steps, found in lengths.items():
        assert all(d is not None and 1 <= d <= max_steps + 1 for d in found), max_steps
    assert sum(d <= 10 for d in lengths[10]) > 0.97 * 300
    assert 0.6 * 300 < sum(d <= 3 for d in lengths[3]) < 0.95 * 300
    assert len({tuple(trinity_random_map(5, 0.8, seed, 10)) for seed in range(20)}) > 15, "seeds differ"


def test_the_observation_is_trinitys_grid_and_lines() -> None:
    env = TrinityFrozenLake(desc=MAP, max_steps=4)
    observation, info = env.reset(seed=0)
    assert observation == (
        "Current Observation (0): \n"
        "P___\n"
        "_O_O\n"
        "___O\n"
        "O__G\n"
        f"{GOAL_LINE}\n"
        "The maximum number of steps remaining is 4."
    )
    assert info == {"map": MAP}
    observation, reward, terminated, truncated, info = env.step("I go down: ```Down```")
    assert observation == (
        "Current Observation (1): \n"
        "____\n"
        "PO_O\n"
        "___O\n"
        "O__G\n"
        f"{GOAL_LINE}\n"
        "The maximum number of steps remaining is 3."
    )
    assert (reward, terminated, truncated, info) == (0.0, False, False, {"action": "Down"})


def test_staying_in_place_gets_trinitys_invalid_line() -> None:
    """An unreadable reply is an invalid action; a move into the edge is valid but moves nothing: Trinity
    shows its invalid line after either, since the grid did not change."""
    env = TrinityFrozenLake(desc=MAP)
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("Down")  # no backticks
    assert info == {"invalid_action": True} and (reward, terminated, truncated) == (0.0, False, False)
    assert observation.split("\n")[-2:] == [INVALID_FEEDBACK, "The maximum number of steps remaining is 9."]
    observation, *_, info = env.step("```Up```")
    assert info == {"action": "Up"} and INVALID_FEEDBACK in observation
    observation, *_ = env.step("```Right```")
    assert INVALID_FEEDBACK not in observation and observation.startswith("Current Observation (3): \n_P__\n")


def test_the_goal_pays_one_and_a_hole_nothing() -> None:
    env = TrinityFrozenLake(desc=["SF", "HG"])
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step("```Right```")
    assert (reward, terminated, truncated) == (0.0, False, False)
    observation, reward, terminated, truncated, info = env.step("```2```")
    assert (reward, terminated, truncated, info) == (1.0, True, False, {"action": "Down", "success": True})
    assert "\n__\nO√\n" in observation
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("```down```")
    assert (reward, terminated, info["success"]) == (0.0, True, False) and "\n__\nXG\n" in observation


def test_max_steps_truncates_and_invalid_replies_count() -> None:
    env = TrinityFrozenLake(desc=MAP, max_steps=2)
    env.reset(seed=0)
    assert env.step("```Jump```")[2:4] == (False, False)
    observation, reward, terminated, truncated, info = env.step("```Right```")
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)
    assert "remaining" not in observation
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("```Right```")


@pytest.mark.parametrize(("reply", "action"), [
    ("```Left```", "Left"), ("```left```", "Left"), ("``` RIGHT ```", "Right"), ("```\nUp\n```", "Up"),
    ("```1```", "Left"), ("```2```", "Down"), ("```3```", "Right"), ("```4```", "Up"), ("```03```", "Right"),
    ("Up is a hole, so ```Up``` is out: ```Down```", "Down"), ("Thinking... Action: ```Right```", "Right"),
    ("```0```", None), ("```5```", None), ("```Upward```", None), ("```go left```", None), ("Left", None),
    ("<action>Left</action>", None), ("```Left", None), ("", None), ("```²```", None),
])
def test_actions_are_read_from_the_last_triple_backtick_span(reply: str, action: str | None) -> None:
    assert read_action(reply) == action


def test_the_map_is_the_seeds_and_slips_are_not() -> None:
    """As in Trinity, gymnasium draws the slips unseeded: the episodes of one seed (a group) slip
    independently on the seed's map."""
    env = TrinityFrozenLake(size=5, p=0.8, max_steps=8, is_slippery=True)
    first, info = env.reset(seed=11)
    assert info["map"] == trinity_random_map(5, 0.8, 11, 8)
    assert env.reset(seed=11)[0] == first
    open_lake = TrinityFrozenLake(desc=["SFFFF", "FFFFF", "FFFFF", "FFFFF", "FFFFG"], max_steps=8, is_slippery=True)
    walks = set()
    for _ in range(6):
        open_lake.reset(seed=11)
        walks.add(tuple(open_lake.step("```Right```")[0] for _ in range(4)))
    assert len(walks) > 2


@pytest.mark.parametrize(("args", "says"), [
    ({}, "size: None must be given (the side of the random maps) unless desc fixes the map"),
    ({"size": 1}, "size: 1 must be an integer >= 2 and <= 32"),
    ({"size": 4, "p": 1.5}, "p: 1.5 must be a number in [0.0, 1.0]"),
    ({"size": 4, "max_steps": 0}, "max_steps: 0 must be an integer >= 1"),
    ({"size": 4, "is_slippery": "no"}, "is_slippery: 'no' must be true or false"),
    ({"desc": ["SF", "FF"]}, "desc: ['SF', 'FF'] must hold exactly one start S and at least one goal G"),
    ({"desc": ["SFG"]}, "desc: ['SFG'] must be a list of at least 2 equally long strings"),
])
def test_bad_arguments_are_config_errors_naming_the_key(args: dict, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        TrinityFrozenLake(**args)
    assert str(e.value).startswith(f"workflow_args.env_args.{says}")
