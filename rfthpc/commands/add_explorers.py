"""`rfthpc add-explorers --run-dir R [--config FILE] [--name N] [--array-size K]`: more explorers for a running run."""

from __future__ import annotations

import argparse
from pathlib import Path


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.commands.submit import print_submission
    from rfthpc.launch.submit import add_explorers

    result = add_explorers(
        Path(args.run_dir), Path(args.config) if args.config else None, overrides, name=args.name,
        array_size=args.array_size, dry_run=args.dry_run, check_paths=not args.no_path_checks,
    )
    print_submission(result, "add-explorers")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `add-explorers` command."""
    p = sub.add_parser("add-explorers", help="add an explorer array (own name, resources, tasksets) to a running run")
    p.add_argument("--run-dir", required=True, help="the run directory `rfthpc submit` printed")
    p.add_argument("--config", help="config of the new array (e.g. explorer_new.yaml); its explorer, cluster, "
                   "tasksets and slurm.explorer sections are used, the rest stays the run's")
    p.add_argument("--name", help="name of the new array (default: explorer.name of --config)")
    p.add_argument("--array-size", type=int, help="array tasks, one rollout engine each")
    p.add_argument("--dry-run", action="store_true", help="write the sbatch script and config; submit nothing")
    p.add_argument("--no-path-checks", action="store_true", help="do not require dataset paths to exist here")
    p.set_defaults(handler=_run, takes_overrides=True)
