"""`rfthpc cancel RUN_DIR [--role trainer|explorer] [--name N]`: cancel a run's Slurm jobs."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.launch.cancel import cancel_jobs
    from rfthpc.rundir.paths import RunDir

    ids = cancel_jobs(RunDir(args.run_dir), role=args.role, name=args.name)
    if ids:
        print(f"rfthpc cancel: cancelled job{'s' if len(ids) > 1 else ''} {', '.join(ids)} "
              "(roles stop cleanly on SIGTERM; `rfthpc submit` of the same config resumes)")
    else:
        print("rfthpc cancel: no queued or running job matches; nothing to cancel")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `cancel` command."""
    p = sub.add_parser("cancel", help="cancel a run's Slurm jobs (all, the trainer, or one explorer array)")
    p.add_argument("run_dir", help="the run directory")
    p.add_argument("--role", choices=["all", "trainer", "explorer"], default="all", help="which jobs (default: all)")
    p.add_argument("--name", help="with --role explorer: only the explorer array of this name")
    p.set_defaults(handler=_run)
