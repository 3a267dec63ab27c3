"""The grid environments' action format: a tagged word, else the reply's last action word."""

from __future__ import annotations

import pytest

from rfthpc.envs.actions import InvalidAction, format_hint, read_action

WORDS = ("Left", "Down", "Right", "Up")


@pytest.mark.parametrize(("reply", "action"), [
    ("Up", "Up"),
    ("  down\n", "Down"),
    ("Left leads into a hole, so I go RIGHT.", "Right"),
    ("I think Up. <action> left </action>", "Left"),
    ("<action>Up</action> no wait <action>Down</action>", "Down"),
    ("Moving Right is safe: <action>Right", "Right"),  # a generation stopped at the closing tag
    ("<ACTION>Up</ACTION>", "Up"),
])
def test_an_action_is_read_from_the_last_tag_or_else_the_last_word(reply: str, action: str) -> None:
    assert read_action(reply, WORDS) == action


@pytest.mark.parametrize(("reply", "says"), [
    ("I am not sure.", "Your reply holds no action. End it with one of Left, Down, Right, Up"),
    ("Upward and leftover", "Your reply holds no action"),
    ("", "Your reply holds no action"),
    ("Down is fine. <action>go down</action>", "<action>go down</action> is not a valid action"),
    ("<action>Left, Up</action>", "<action>Left, Up</action> is not a valid action"),
    ("<action></action> Up", "<action></action> is not a valid action"),
])
def test_anything_else_is_invalid_with_feedback(reply: str, says: str) -> None:
    with pytest.raises(InvalidAction, match="^" + says.replace("(", r"\(")):
        read_action(reply, WORDS)


def test_the_hint_shows_the_tagged_form() -> None:
    assert format_hint(WORDS) == "Valid actions: Left, Down, Right, Up. Answer with one action, e.g. <action>Left</action>."
