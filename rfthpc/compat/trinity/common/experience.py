"""`trinity.common.experience.Experience` as a plugin workflow uses it: it sets `reward`, `info` and `metrics`
on the experiences its model calls made and returns them. The tokens and log-probabilities of each call are
recorded by rfthpc's endpoint, not here: `call` ties an experience to its call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Experience:
    """One call of the policy the episode made, to be rewarded by the workflow."""

    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    prompt_text: str = ""
    response_text: str = ""
    call: int | None = None
    """The episode's call this experience is (0, 1, ... in the order the endpoint answered them)."""
