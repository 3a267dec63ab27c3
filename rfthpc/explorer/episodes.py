"""Metrics of multi-turn episodes, from the facts `env_workflow` records in each experience's info.

    <prefix>/turns_mean           policy turns per episode
    <prefix>/success_rate         episodes that succeeded, of those whose environment reports success
    <prefix>/truncation_rate      episodes cut short (by the environment or a workflow limit)
    <prefix>/invalid_action_rate  invalid actions per turn

Experiences without `turns` in their info (single-turn workflows) are not episodes: no metrics. An episode
trained step-wise is one experience per turn, each carrying the episode's facts: it counts once, by its first
step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rfthpc.workflows.base import STEP


def stands_for_episode(info: Mapping[str, Any]) -> bool:
    """Whether an experience is its episode's record in episode-level figures: a whole multi-turn episode, or
    the first step of one trained step-wise (module doc)."""
    return "turns" in info and info.get(STEP, 0) == 0


def episode_metrics(prefix: str, infos: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The episode metrics (module doc) of the experiences whose infos are `infos`."""
    episodes = [i for i in infos if stands_for_episode(i)]
    if not episodes:
        return {}
    turns = [int(i["turns"]) for i in episodes]
    out = {
        f"{prefix}/turns_mean": float(np.mean(turns)),
        f"{prefix}/truncation_rate": float(np.mean([bool(i.get("truncated")) for i in episodes])),
        f"{prefix}/invalid_action_rate": sum(int(i.get("invalid_actions", 0)) for i in episodes) / max(sum(turns), 1),
    }
    judged = [bool(i["success"]) for i in episodes if i.get("success") is not None]
    if judged:
        out[f"{prefix}/success_rate"] = float(np.mean(judged))
    return out
