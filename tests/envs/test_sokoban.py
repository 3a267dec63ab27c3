"""Sokoban as a text environment: rules, rewards, rendering, solvable levels by seed, invalid actions."""

from __future__ import annotations

from collections import deque

import pytest

from rfthpc.envs.sokoban import Sokoban
from rfthpc.envs.sokoban_levels import DIRECTIONS, Level, generate_level, parse_level
from rfthpc.errors import ConfigError

LEGEND = "Legend: # wall, _ floor, O target, X box, * box on a target, P you, + you on a target."
HINT = "Valid actions: Up, Down, Left, Right. Answer with one action, e.g. <action>Up</action>."
LEVEL = ["######",
         "#P___#",
         "#_X_O#",
         "#_X__#",
         "#__O_#",
         "######"]


def play(level: list[str], *replies: str) -> tuple[Sokoban, list[tuple]]:
    env = Sokoban(level=level)
    env.reset(seed=0)
    return env, [env.step(reply) for reply in replies]


def test_the_first_observation_is_the_intro_legend_grid_and_actions() -> None:
    observation, info = Sokoban(level=LEVEL).reset(seed=0)
    assert observation == (
        "Sokoban: push every box X onto a target O. You can push a box but not pull it, and only one at a time.\n"
        f"{LEGEND}\n"
        "######\n"
        "#P___#\n"
        "#_X_O#\n"
        "#_X__#\n"
        "#__O_#\n"
        "######\n"
        f"{HINT}"
    )
    assert info == {"level": LEVEL}


def test_walking_costs_the_step_penalty() -> None:
    _, [(observation, reward, terminated, truncated, info)] = play(LEVEL, "Right")
    assert observation == f"You moved Right.\n{LEGEND}\n######\n#_P__#\n#_X_O#\n#_X__#\n#__O_#\n######\n{HINT}"
    assert (reward, terminated, truncated, info) == (pytest.approx(-0.1), False, False, {"action": "Right"})


def test_walls_and_blocked_boxes_stop_a_move() -> None:
    _, steps = play(LEVEL, "Up", "Right", "Down")
    assert steps[0][0].startswith("A wall blocks Up: you did not move.\n")
    assert steps[0][1] == pytest.approx(-0.1)
    # From above the two stacked boxes, Down would push a box into the other.
    assert steps[2][0].startswith("The box cannot be pushed Down: you did not move.\n")
    assert steps[2][0].split("\n")[3] == "#_P__#"
    _, steps = play(["#####", "#PX_#", "#__O#", "#####"], "Down", "Right", "Up")
    assert steps[2][0].startswith("The box cannot be pushed Up: you did not move.\n")


def test_pushing_boxes_onto_targets_until_solved() -> None:
    env, steps = play(LEVEL, "Down", "Right", "Right")
    observation, reward, terminated, _, info = steps[2]
    assert observation.startswith("You pushed a box Right.\n")
    assert observation.split("\n")[4] == "#__P*#"
    assert (reward, terminated, info) == (pytest.approx(-0.1 + 1.0), False, {"action": "Right"})
    # The lower box: push it right from its left, then down onto the bottom target from above.
    for reply in ("Left", "Left", "Down", "Right", "Up", "Right"):
        _, reward, terminated, truncated, _ = env.step(reply)
        assert (reward, terminated, truncated) == (pytest.approx(-0.1), False, False)
    observation, reward, terminated, truncated, info = env.step("Down")
    assert observation == (f"You pushed a box Down. Every box is on a target: solved!\n{LEGEND}\n"
                           "######\n#____#\n#___*#\n#__P_#\n#__*_#\n######")
    assert (reward, terminated, truncated, info) == (pytest.approx(-0.1 + 1.0 + 10.0), True, False,
                                                     {"action": "Down", "success": True})
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("Up")


def test_pushing_a_box_off_a_target_costs_one() -> None:
    _, steps = play(["#######",
                     "#P*__O#",
                     "#_X___#",
                     "#######"], "Right", "Right", "Right")
    assert [step[1] for step in steps] == [pytest.approx(-1.1), pytest.approx(-0.1), pytest.approx(0.9)]
    assert [step[0].split("\n")[3] for step in steps] == ["#_+X_O#", "#_OPXO#", "#_O_P*#"]
    assert not steps[2][2]  # the other box is still off its target


def test_an_invalid_reply_costs_a_step_and_does_not_move() -> None:
    _, [(observation, reward, terminated, truncated, info)] = play(LEVEL, "Jump over the box.")
    assert observation.startswith("Invalid action: Your reply holds no action. End it with one of Up, Down, Left, "
                                  "Right, e.g. <action>Up</action>. You did not move.\n")
    assert observation.split("\n")[3] == "#P___#"
    assert (reward, terminated, truncated, info) == (pytest.approx(-0.1), False, False, {"invalid_action": True})


def test_the_step_limit_truncates() -> None:
    env = Sokoban(level=LEVEL, max_steps=2)
    env.reset()
    assert env.step("Right")[3] is False
    observation, _, terminated, truncated, info = env.step("Right")
    assert observation.startswith("You moved Right. The step limit (2) is reached.\n")
    assert (terminated, truncated, info["success"]) == (False, True, False)


def solvable(level: Level, limit: int = 200_000) -> bool:
    """Breadth-first search over (player, boxes) states: can every box reach a target?"""
    start = (level.player, level.boxes)
    seen, queue = {start}, deque([start])
    while queue and len(seen) < limit:
        player, boxes = queue.popleft()
        if boxes == level.targets:
            return True
        for dr, dc in DIRECTIONS.values():
            ahead = (player[0] + dr, player[1] + dc)
            if ahead not in level.floor:
                continue
            if ahead in boxes:
                beyond = (ahead[0] + dr, ahead[1] + dc)
                if beyond not in level.floor or beyond in boxes:
                    continue
                state = (ahead, boxes - {ahead} | {beyond})
            else:
                state = (ahead, boxes)
            if state not in seen:
                seen.add(state)
                queue.append(state)
    assert len(seen) < limit, "the search gave up: use a smaller level"
    return False


def test_the_solver_used_below_can_say_no() -> None:
    assert not solvable(parse_level(["#####", "#X_O#", "#__P#", "#####"]))  # a box in a corner
    assert solvable(parse_level(["#####", "#___#", "#PXO#", "#####"]))


@pytest.mark.parametrize(("rows", "cols", "boxes"), [(6, 6, 1), (7, 7, 2), (6, 8, 2)])
def test_random_levels_are_solvable_unsolved_and_as_asked(rows: int, cols: int, boxes: int) -> None:
    for seed in range(25):
        level = generate_level(seed, rows, cols, boxes, search_depth=100)
        assert (level.rows, level.cols, len(level.boxes), len(level.targets)) == (rows, cols, boxes, boxes)
        assert not level.solved
        assert level.player in level.floor and level.player not in level.boxes
        assert level.boxes <= level.floor and level.targets <= level.floor
        assert all(0 < r < rows - 1 and 0 < c < cols - 1 for r, c in level.floor), "the outer walls stay"
        assert solvable(level), level.render()


def test_a_seed_is_a_level_and_seeds_differ() -> None:
    env = Sokoban(dim_room=[7, 7], num_boxes=2)
    first = env.reset(seed=5)
    assert Sokoban(dim_room=[7, 7], num_boxes=2).reset(seed=5) == first
    assert env.reset(seed=5) == first
    levels = {tuple(Sokoban().reset(seed=s)[1]["level"]) for s in range(10)}
    assert len(levels) == 10
    a, b = Sokoban(), Sokoban()
    a.reset(seed=1)
    b.reset(seed=1)
    assert [a.reset()[0] for _ in range(3)] == [b.reset()[0] for _ in range(3)]


@pytest.mark.parametrize(("args", "says"), [
    ({"dim_room": [4, 6]}, r"workflow_args\.env_args\.dim_room: \[4, 6\] must be \[rows, columns\]"),
    ({"dim_room": 6}, r"workflow_args\.env_args\.dim_room: 6 must be \[rows, columns\]"),
    ({"num_boxes": 0}, r"workflow_args\.env_args\.num_boxes: 0 must be an integer >= 1 and <= 4"),
    ({"dim_room": [5, 5], "num_boxes": 3}, r"workflow_args\.env_args\.num_boxes: 3 must be an integer >= 1 and <= 2"),
    ({"search_depth": 0}, r"workflow_args\.env_args\.search_depth: 0 must be an integer >= 1"),
    ({"level": ["#####", "#PX_#", "#####"]}, r"workflow_args\.env_args\.level: .* as many boxes .* 1 boxes, 0 targets"),
    ({"level": ["####", "#O_#", "#X_#"]}, r"workflow_args\.env_args\.level: .* exactly one player"),
    ({"level": ["#####", "#PXa#"]}, r"workflow_args\.env_args\.level: .* strings \(rows\) of the characters"),
])
def test_bad_arguments_are_config_errors_naming_the_key(args: dict, says: str) -> None:
    with pytest.raises(ConfigError, match="^" + says):
        Sokoban(**args)
