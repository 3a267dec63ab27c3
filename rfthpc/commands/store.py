"""`rfthpc store inspect|gc|export RUN_DIR`: look into a run's experience store, clean it, or export it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.store import collect_garbage, format_inspect, inspect_store
    from rfthpc.store.layout import open_store

    run_dir = Path(args.run_dir)
    if args.action == "inspect":
        report = inspect_store(run_dir)
        print(json.dumps(report, indent=2, default=str) if args.json else format_inspect(report))
    elif args.action == "export":
        from rfthpc.store.audit import export_groups

        open_store(run_dir)
        if args.out is None:
            counts = export_groups(run_dir, sys.stdout)
        else:
            with open(args.out, "w") as f:
                counts = export_groups(run_dir, f)
        print("exported " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no groups"),
              file=sys.stderr)
    else:
        removed = collect_garbage(run_dir)
        print(", ".join(f"{k}: {v}" for k, v in removed.items()) or "nothing to remove")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `store` command."""
    p = sub.add_parser("store",
                       help="inspect a run's experience store (counts, rates, staleness) or garbage-collect it")
    p.add_argument("action", choices=["inspect", "gc", "export"],
                   help="inspect: counts, per-explorer rates, version and staleness histograms; "
                        "gc: delete chunks consumed by the last checkpoint and stale temporary files; "
                        "export: every group kept in the store as JSON lines (with filesystem.keep_consumed_chunks, "
                        "the run's whole experience history), each with its status (taken, pending, eval)")
    p.add_argument("run_dir", help="the run directory")
    p.add_argument("--json", action="store_true", help="inspect: print the report as JSON")
    p.add_argument("--out", help="export: the file to write (default: standard output)")
    p.set_defaults(handler=_run)
