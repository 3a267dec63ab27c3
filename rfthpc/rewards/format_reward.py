"""Format rewards: does the response state its final answer the way the prompt asked?"""

from __future__ import annotations

import re

# A GSM8K answer line (`#### 42`) or a MATH-style `\boxed{...}`.
FINAL_ANSWER_PATTERN = r"####\s*-?\$?\d[\d,]*(?:\.\d+)?|\\boxed\{.+?\}"


def format_reward(
    response: str, truth: str | None = None, pattern: str = FINAL_ANSWER_PATTERN, score: float = 1.0
) -> dict[str, float]:
    """{"format": score} if `pattern` (a regex) occurs in the response, else 0. `truth` is unused."""
    try:
        found = re.search(pattern, response) is not None
    except re.error as e:
        raise ValueError(f"reward_fn_args.pattern {pattern!r} is not a valid regex: {e}") from None
    return {"format": score if found else 0.0}
