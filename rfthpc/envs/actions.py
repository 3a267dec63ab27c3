"""Reading the policy's action from its reply: one word of a fixed set (the grid environments' format).

The format, strict about what counts and lenient about what surrounds it:
- a reply with an `<action>…</action>` tag is read from its last tag alone, whose content must be one
  action word (`<action> right </action>` is Right; `<action>go right</action>` is invalid). A last tag
  left open at the end of the reply counts too (`… <action>Right`), since a workflow may stop the
  generation at `</action>`;
- a reply without a tag is read as its last action word: reasoning may mention other moves before it
  (`Left leads into a hole, so Down` is Down);
- words are matched whole and in any case (`up`, `UP`); `Upward` or `Leftover` are no action words.
Anything else is an invalid action: the environment does not move and says why (`InvalidAction`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ACTION_TAG = "action"
_OPEN = f"<{ACTION_TAG}>"
_CLOSE = f"</{ACTION_TAG}>"


class InvalidAction(ValueError):
    """The reply holds no allowed action; the message is the feedback the policy is shown."""


def format_hint(actions: Sequence[str]) -> str:
    """How to answer: the line an observation ends with while the episode goes on."""
    return f"Valid actions: {', '.join(actions)}. Answer with one action, e.g. {_OPEN}{actions[0]}{_CLOSE}."


def read_action(reply: str, actions: Sequence[str]) -> str:
    """The action of `reply` (spelled as in `actions`) by the rules of the module docstring; raise
    `InvalidAction` with feedback for the policy if there is none."""
    by_word = {a.lower(): a for a in actions}
    lowered = reply.lower()
    opened = lowered.rfind(_OPEN)
    if opened >= 0:
        content = reply[opened + len(_OPEN):]
        closed = content.lower().find(_CLOSE)
        word = (content if closed < 0 else content[:closed]).strip()
        if word.lower() in by_word:
            return by_word[word.lower()]
        raise InvalidAction(f"{_OPEN}{word}{_CLOSE} is not a valid action: put exactly one of "
                            f"{', '.join(actions)} inside the tags.")
    pattern = r"\b(" + "|".join(re.escape(a.lower()) for a in actions) + r")\b"
    found = re.findall(pattern, lowered)
    if found:
        return by_word[found[-1]]
    raise InvalidAction(f"Your reply holds no action. End it with one of {', '.join(actions)}, "
                        f"e.g. {_OPEN}{actions[0]}{_CLOSE}.")
