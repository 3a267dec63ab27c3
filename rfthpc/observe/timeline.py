"""Where each role's time goes, read back from its monitor records (docs/performance.md).

Every trainer step record carries how long the step waited for experience, computed, published and
checkpointed (`timing/*`, in that order, ending at the record's time); every explorer batch record
how long it waited for weights (loading included) and then generated (`rollout/wait_s`,
`rollout/time_s`); every evaluation record its duration (`eval/time_s`). Laid end to end before
each record's timestamp, they give the spans `rfthpc plot` draws as a timeline (do the roles
overlap?) and the shares `rfthpc status` prints (what is each role waiting for?).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from rfthpc.rundir.metrics import read_metrics
from rfthpc.rundir.paths import RunDir

TRAINER_PHASES = (
    ("timing/wait_experience_s", "waiting for experience"),
    ("timing/compute_s", "computing"),
    ("timing/publish_s", "publishing weights"),
    ("timing/checkpoint_s", "checkpointing"),
)
"""A trainer step's phases, in the order they happen."""
EXPLORER_PHASES = (
    ("rollout/wait_s", "waiting for weights"),
    ("rollout/time_s", "generating"),
)
"""An explorer batch's phases, in the order they happen."""
EVAL_PHASES = (("eval/time_s", "evaluating"),)
"""An evaluation's one phase."""


@dataclass(frozen=True)
class Span:
    """One phase of one role, in seconds since the epoch."""

    phase: str
    start: float
    end: float


def record_spans(record: dict[str, Any], phases: tuple[tuple[str, str], ...]) -> list[Span]:
    """The phases a record reports, laid end to end so that the last one ends at its `time`; a
    record without them (or without a time) gives none."""
    if not isinstance(record.get("time"), (int, float)):
        return []
    found = [(label, float(record[key])) for key, label in phases if isinstance(record.get(key), (int, float))]
    spans, end = [], float(record["time"])
    for label, seconds in reversed(found):
        if seconds > 0:
            spans.append(Span(label, end - seconds, end))
        end -= max(0.0, seconds)
    return spans[::-1]


def role_spans(run: RunDir) -> dict[str, list[Span]]:
    """Per role ("trainer", "<explorer name> rank <k>"), its spans in time order."""
    explorers = {p.stem.removeprefix("explorer_"): read_metrics(p) for p in sorted(run.monitor.glob("explorer_*.jsonl"))}
    return spans_of(read_metrics(run.monitor / "trainer.jsonl"), explorers)


def spans_of(trainer: list[dict[str, Any]], explorers: dict[str, list[dict[str, Any]]]) -> dict[str, list[Span]]:
    """`role_spans` of records already read: the trainer's, and each explorer rank's by its monitor
    name (`<explorer name>_<rank>`)."""
    out = {"trainer": [s for r in trainer for s in record_spans(r, TRAINER_PHASES)]}
    for key, records in explorers.items():
        name, _, rank = key.rpartition("_")
        spans = [s for r in records for s in record_spans(r, EXPLORER_PHASES + EVAL_PHASES)]
        out[f"{name} rank {rank}" if name else f"explorer {rank}"] = sorted(spans, key=lambda s: s.start)
    return {role: spans for role, spans in out.items() if spans}


def shares(spans: list[Span], window_s: float | None = None) -> dict[str, float]:
    """Each phase's share of the time the spans cover; with `window_s`, of the spans' last
    `window_s` seconds only (a span reaching into the window counts with its part inside)."""
    if not spans:
        return {}
    since = max(s.end for s in spans) - window_s if window_s is not None else float("-inf")
    total: dict[str, float] = defaultdict(float)
    for s in spans:
        total[s.phase] += max(0.0, s.end - max(s.start, since))
    whole = sum(total.values())
    return {phase: seconds / whole for phase, seconds in total.items() if seconds > 0} if whole > 0 else {}
