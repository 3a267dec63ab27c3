"""A finished demo run's figures: its evaluations before and after RFT, read from the explorers'
metric records (`monitor/explorer_*.jsonl`). Both demos (`rfthpc.demos.gsm8k`, `rfthpc.demos.frozenlake`)
print their FIGURES line from these.
"""

from __future__ import annotations

from pathlib import Path

from rfthpc.errors import UserError
from rfthpc.rundir.metrics import read_metrics


def eval_accuracy(run_dir: Path, metric: str = "accuracy") -> list[tuple[int, str, float]]:
    """(policy version, eval taskset, value) of every evaluation an explorer logged, in version order;
    `metric` is the eval metric read (`accuracy`; the agentic demo's `success_rate`)."""
    out = []
    suffix = f"/{metric}"
    for path in sorted((Path(run_dir) / "monitor").glob("explorer_*.jsonl")):
        for rec in read_metrics(path):
            for key, value in rec.items():
                if key.startswith("eval/") and key.endswith(suffix) and isinstance(value, (int, float)):
                    out.append((int(rec["step"]), key[len("eval/"):-len(suffix)], float(value)))
    return sorted(out)


def last_stage_start(run_dir: Path) -> int:
    """The global step after which the run's last trainer stage began (0 for a one-stage run)."""
    records = read_metrics(Path(run_dir) / "monitor" / "trainer.jsonl")
    last = max((int(r.get("training/stage_index", 0)) for r in records), default=0)
    first = min((int(r["step"]) for r in records if int(r.get("training/stage_index", 0)) == last), default=1)
    return first - 1


def demo_figures(run_dir: Path, metric: str = "accuracy", taskset: str | None = None) -> tuple[float, float]:
    """(eval `metric` after the SFT warm-up, after RFT) of a finished demo run, on the eval taskset
    named `taskset` (None: the run's only one, or the first logged of each evaluation).

    The first is the evaluation of the policy the RFT stage starts from (evaluated on start-up),
    the second the evaluation of the final policy.
    """
    start = last_stage_start(run_dir)
    evals = [e for e in eval_accuracy(run_dir, metric) if taskset is None or e[1] == taskset]
    first = [acc for version, _, acc in evals if version == start]
    if not first or evals[-1][0] <= start:
        named = f" of eval taskset {taskset!r}" if taskset is not None else ""
        raise UserError(
            f"{run_dir} has no evaluation{named} of version {start} (the start of RFT) and of a later version "
            f"(found versions {sorted({v for v, _, _ in evals})}); is the run finished? See {run_dir}/log/"
        )
    return first[0], evals[-1][2]
