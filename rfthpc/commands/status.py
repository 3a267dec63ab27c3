"""`rfthpc status RUN_DIR`: jobs and their Slurm states, trainer step, policy version, groups, explorers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.observe.status import collect_status, format_status

    status = collect_status(Path(args.run_dir), timeout_s=args.timeout)
    if args.json:
        status["jobs"] = [{"record": vars(j["record"]), "tasks": [vars(t) for t in j["tasks"]]} for j in status["jobs"]]
        print(json.dumps(status, indent=2, sort_keys=True, default=str))
    else:
        print(format_status(status), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `status` command."""
    p = sub.add_parser("status", help="show a run's jobs, trainer step, policy version, groups and explorers")
    p.add_argument("run_dir", help="the run directory")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for Slurm (sacct/squeue)")
    p.set_defaults(handler=_run)
