"""The seed of each episode of an environment that draws its maps or levels at random."""

from __future__ import annotations

import random


class EpisodeSeeds:
    """`reset(seed)` plays the episode of that seed; a later `reset()` without one continues from it,
    drawing the next episode's seed, so a seeded sequence of episodes is reproducible."""

    def __init__(self) -> None:
        self._rng = random.Random()

    def next(self, seed: int | None) -> int:
        """The seed of the episode `reset(seed)` starts."""
        if seed is not None:
            self._rng = random.Random(seed)
            return seed
        return self._rng.randrange(2**31)
