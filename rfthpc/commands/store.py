"""`rfthpc store inspect|gc RUN_DIR`: look into a run's experience store, or clean it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.store import collect_garbage, format_inspect, inspect_store

    run_dir = Path(args.run_dir)
    if args.action == "inspect":
        report = inspect_store(run_dir)
        print(json.dumps(report, indent=2, default=str) if args.json else format_inspect(report))
    else:
        removed = collect_garbage(run_dir)
        print(", ".join(f"{k}: {v}" for k, v in removed.items()) or "nothing to remove")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `store` command."""
    p = sub.add_parser("store",
                       help="inspect a run's experience store (counts, rates, staleness) or garbage-collect it")
    p.add_argument("action", choices=["inspect", "gc"],
                   help="inspect: counts, per-explorer rates, version and staleness histograms; "
                        "gc: delete chunks consumed by the last checkpoint and stale temporary files")
    p.add_argument("run_dir", help="the run directory")
    p.add_argument("--json", action="store_true", help="inspect: print the report as JSON")
    p.set_defaults(handler=_run)
