"""Metrics of judged responses, from the facts the judging workflows (`rfthpc.workflows.judge`,
`rfthpc.workflows.ruler`) record in each experience's info.

    <prefix>/judge_success   share of the experiences a judge's reply was read for that were parsed
    <prefix>/gold_reward     mean reward on the reference answer of responses rewarded otherwise
                             (the RULER workflows' record; Trinity-RFT's metric of that name)

Experiences without these keys give neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

RECORDED = ("judge_success", "gold_reward")
"""The info keys averaged, each into `<prefix>/<key>`."""


def judge_metrics(prefix: str, infos: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The judge metrics (module doc) of the experiences whose infos are `infos`."""
    infos = list(infos)
    values = {key: [float(i[key]) for i in infos if key in i] for key in RECORDED}
    return {f"{prefix}/{key}": float(np.mean(v)) for key, v in values.items() if v}
