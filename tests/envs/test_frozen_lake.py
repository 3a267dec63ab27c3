"""FrozenLake as a text environment: rules, rendering, seeds, invalid actions and arguments."""

from __future__ import annotations

import pytest
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from rfthpc.envs.frozen_lake import FrozenLake
from rfthpc.errors import ConfigError

MAP = ["SFFF", "FHFH", "FFFH", "HFFG"]
HINT = "Valid actions: Left, Down, Right, Up. Answer with one action, e.g. <action>Left</action>."


def grid(observation: str) -> list[str]:
    """The grid rows of an observation (the lines between the legend and the hint)."""
    lines = observation.split("\n")
    start = lines.index("Legend: P you, _ frozen ice, O hole, G goal.") + 1
    return [line for line in lines[start:] if line != HINT]


def test_the_first_observation_is_the_intro_legend_grid_and_actions() -> None:
    observation, info = FrozenLake(desc=MAP).reset(seed=0)
    assert observation == (
        "You are on a frozen lake. Walk from P to the goal G without falling into a hole O.\n"
        "Legend: P you, _ frozen ice, O hole, G goal.\n"
        "P___\n"
        "_O_O\n"
        "___O\n"
        "O__G\n"
        f"{HINT}"
    )
    assert info == {"map": MAP}
    slippery, _ = FrozenLake(desc=MAP, is_slippery=True).reset(seed=0)
    assert slippery.split("\n")[0].endswith("The ice is slippery: a move may take you sideways instead.")


def test_a_move_shows_feedback_and_the_new_grid() -> None:
    env = FrozenLake(desc=MAP)
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("Down")
    assert observation == (
        "You moved Down.\n"
        "Legend: P you, _ frozen ice, O hole, G goal.\n"
        "____\n"
        "PO_O\n"
        "___O\n"
        "O__G\n"
        f"{HINT}"
    )
    assert (reward, terminated, truncated, info) == (0.0, False, False, {"action": "Down"})


def test_the_edge_stops_a_move() -> None:
    env = FrozenLake(desc=MAP)
    env.reset(seed=0)
    observation, reward, terminated, _, _ = env.step("Up")
    assert observation.startswith("You are at the edge: Up does not move you.\n")
    assert grid(observation)[0] == "P___"
    assert (reward, terminated) == (0.0, False)


def test_a_hole_ends_the_episode_without_reward_or_success() -> None:
    env = FrozenLake(desc=MAP)
    env.reset(seed=0)
    env.step("Right")
    observation, reward, terminated, truncated, info = env.step("Down")
    assert observation.startswith("You moved Down. You fell into a hole.\n")
    assert grid(observation) == ["____", "_P_O", "___O", "O__G"]
    assert not observation.endswith(HINT)
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("Up")


def test_the_goal_gives_reward_one_and_success() -> None:
    env = FrozenLake(desc=MAP)
    env.reset(seed=0)
    rewards = [env.step(word)[1] for word in ("Down", "Down", "Right", "Right", "Down")]
    observation, reward, terminated, truncated, info = env.step("Right")
    assert rewards == [0.0] * 5
    assert observation.startswith("You moved Right. You reached the goal!\n")
    assert (reward, terminated, truncated, info) == (1.0, True, False, {"action": "Right", "success": True})


def test_an_invalid_reply_does_not_move_and_says_why() -> None:
    env = FrozenLake(desc=MAP)
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("Let me think about <action>jump</action>")
    assert observation.startswith("Invalid action: <action>jump</action> is not a valid action: put exactly one "
                                  "of Left, Down, Right, Up inside the tags. You did not move.\n")
    assert grid(observation)[0] == "P___"
    assert (reward, terminated, truncated, info) == (0.0, False, False, {"invalid_action": True})


def test_the_step_limit_truncates_and_invalid_replies_count() -> None:
    env = FrozenLake(desc=MAP, max_steps=3)
    env.reset(seed=0)
    assert env.step("Down")[3] is False
    assert env.step("nothing")[3] is False
    observation, reward, terminated, truncated, info = env.step("Up")
    assert observation.startswith("You moved Up. The step limit (3) is reached.\n")
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)
    # A reset starts over.
    assert env.reset(seed=0)[0].split("\n")[2] == "P___"
    assert env.step("Down")[3] is False


def test_a_seed_is_a_map_drawn_as_gymnasium_draws_it() -> None:
    env = FrozenLake(size=6, p=0.7)
    first, info = env.reset(seed=11)
    assert info["map"] == generate_random_map(size=6, p=0.7, seed=11)
    assert env.reset(seed=11) == (first, info)
    maps = {tuple(FrozenLake(size=6, p=0.7).reset(seed=s)[1]["map"]) for s in range(8)}
    assert len(maps) > 4


def test_a_seed_is_also_the_sequence_of_slips() -> None:
    def play(seed: int) -> list[str]:
        env = FrozenLake(size=8, is_slippery=True, max_steps=40)
        env.reset(seed=seed)
        observations = []
        for i in range(40):
            observation, _, terminated, truncated, _ = env.step(("Right", "Down")[i % 2])
            observations.append(observation)
            if terminated or truncated:
                break
        return observations

    episodes = [play(seed) for seed in range(6)]
    assert episodes == [play(seed) for seed in range(6)]
    assert any("slipped" in o for episode in episodes for o in episode)


def test_unseeded_resets_follow_the_last_seed() -> None:
    a, b = FrozenLake(size=5), FrozenLake(size=5)
    a.reset(seed=3)
    b.reset(seed=3)
    assert [a.reset()[1]["map"] for _ in range(3)] == [b.reset()[1]["map"] for _ in range(3)]


@pytest.mark.parametrize(("args", "says"), [
    ({"size": 1}, r"workflow_args\.env_args\.size: 1 must be an integer >= 2 and <= 32"),
    ({"size": True}, r"workflow_args\.env_args\.size: True must be an integer"),
    ({"p": 0.2}, r"workflow_args\.env_args\.p: 0\.2 must be a number in \[0\.5, 1\.0\]"),
    ({"is_slippery": "yes"}, r"workflow_args\.env_args\.is_slippery: 'yes' must be true or false"),
    ({"max_steps": 0}, r"workflow_args\.env_args\.max_steps: 0 must be an integer >= 1"),
    ({"desc": ["SF", "FGF"]}, r"workflow_args\.env_args\.desc: .* equally long strings"),
    ({"desc": ["SF", "SG"]}, r"workflow_args\.env_args\.desc: .* exactly one start S and at least one goal G"),
])
def test_bad_arguments_are_config_errors_naming_the_key(args: dict, says: str) -> None:
    with pytest.raises(ConfigError, match="^" + says):
        FrozenLake(**args)


def test_the_surroundings_are_described_in_words_when_asked() -> None:
    env = FrozenLake(desc=["SFF", "FHF", "FFG"], describe_surroundings=True)
    first, _ = env.reset(seed=0)
    # Last in the observation, nearest the reply it informs, each cell at the same place from the end.
    assert first.endswith("\nThe goal is 2 Down and 2 Right.\nAround you: Left edge, Down ice, Right ice, Up edge.")
    moved = env.step("Right")[0]
    assert moved.endswith("\nThe goal is 2 Down and 1 Right.\nAround you: Left ice, Down hole, Right ice, Up edge.")
    env.step("Right")
    env.step("Down")
    won = env.step("Down")[0]
    assert "Around you" not in won and "You reached the goal!" in won
    assert "Around you" not in FrozenLake(desc=["SF", "FG"]).reset(seed=0)[0]


def test_without_the_map_the_surroundings_are_all_that_is_shown() -> None:
    shown = FrozenLake(desc=["SFF", "FHF", "FFG"], describe_surroundings=True, show_map=False)
    full = FrozenLake(desc=["SFF", "FHF", "FFG"], describe_surroundings=True)
    assert shown.reset(seed=0)[0] == ("You are on a frozen lake. Walk from P to the goal G without falling into a hole "
                                      "O.\nValid actions: Left, Down, Right, Up. Answer with one action, e.g. "
                                      "<action>Left</action>.\nThe goal is 2 Down and 2 Right.\nAround you: Left edge, "
                                      "Down ice, Right ice, Up edge.")
    full.reset(seed=0)
    for move in ("Right", "Down"):
        observation, *outcome = shown.step(move)
        with_map, *same = full.step(move)
        # The same episode as with the grid, and the same lines but the legend and the grid.
        assert outcome == same
        assert observation.split("\n") == [line for line in with_map.split("\n")
                                           if not line.startswith("Legend") and set(line) - set("_PGO")]
    assert "Legend" not in observation and "You fell into a hole." in observation and "Around you" not in observation


def test_without_the_map_the_surroundings_must_be_described() -> None:
    with pytest.raises(ConfigError, match=r"^workflow_args\.env_args\.show_map: False shows the map only as its "
                                          r"surroundings: set describe_surroundings: true too$"):
        FrozenLake(show_map=False)
