"""`rfthpc submit --config FILE [overrides] [--dry-run] [--resume]`: queue a run on Slurm.

With `slurm.executor: local` the roles run here as local processes instead (as `rfthpc run`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

from rfthpc.commands import print_notes

if TYPE_CHECKING:
    from rfthpc.launch.submit import SubmitResult


def print_submission(result: SubmitResult, command: str) -> None:
    """Print the jobs a submission queued and how to watch and stop them (for a dry run: the
    scripts it would have submitted)."""
    if result.dry_run:
        print(f"rfthpc {command} --dry-run: nothing submitted; run directory {result.run_dir.root} is ready, "
              "the scripts that would be submitted are:")
        for path in result.scripts:
            print(f"  {path}")
        return
    root = shlex.quote(str(result.run_dir.root))
    print(f"rfthpc {command}: run directory {result.run_dir.root}")
    for r in result.records:
        if r.role == "explorer":
            what = f"explorer array {r.explorer!r}, {r.array_size} task{'s' if r.array_size != 1 else ''}"
            log = f"{r.log_dir}/{r.job_id}_<rank>_0_log.out"
        elif r.role == "hetjob":
            nodes = f"{r.trainer_nodes} node{'s' if r.trainer_nodes != 1 else ''}"
            what = f"heterogeneous job: trainer ({nodes}) + {r.array_size} explorers {r.explorer!r}"
            # srun names the explorer tasks' logs after their component's job id (the leader's + 1).
            log = f"{r.log_dir}/{r.job_id}_0_log.out, explorers {r.log_dir}/{int(r.job_id) + 1}_*_log.out"
        elif r.role == "colocated":
            what = f"colocated job: trainer + {r.array_size} explorers {r.explorer!r} on one node's GPUs"
            log = f"{r.log_dir}/{r.job_id}_<task>_log.out (task 0 the trainer, task k + 1 explorer k)"
        else:
            what = f"trainer, {r.trainer_nodes} node{'s' if r.trainer_nodes != 1 else ''}"
            log = f"{r.log_dir}/{r.job_id}_0_log.out"
        print(f"  job {r.job_id}: {what}; log {log}")
    print(f"watch: rfthpc status {root}")
    print(f"       squeue -j {','.join(r.job_id for r in result.records)}")
    print(f"stop:  rfthpc cancel {root}")


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.config import load_config
    from rfthpc.launch.submit import run_here, submit_run

    loaded = load_config(args.config, overrides, check_paths=not args.no_path_checks,
                         prog=f"rfthpc submit --config {args.config}")
    print_notes(loaded.notes)
    if loaded.config.slurm.executor == "local":
        return run_here(loaded, resume=args.resume, dry_run=args.dry_run)
    result = submit_run(loaded, resume=args.resume, dry_run=args.dry_run)
    if not result.dry_run and not result.records:
        print("rfthpc submit: the config's stages need neither a trainer nor explorers; nothing submitted",
              file=sys.stderr)
        return 0
    print_submission(result, "submit")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `submit` command."""
    p = sub.add_parser("submit", help="queue a run on Slurm: a trainer job and an explorer array (or one hetjob)")
    p.add_argument("--config", required=True, help="YAML config file (Trinity-RFT shape)")
    p.add_argument("--dry-run", action="store_true",
                   help="create the run directory and its config.yaml, write the sbatch scripts to "
                        "<run dir>/slurm/dry-run; submit nothing")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in an existing run directory, even with a changed config")
    p.add_argument("--no-path-checks", action="store_true",
                   help="do not require model and dataset paths to exist on this machine")
    p.set_defaults(handler=_run, takes_overrides=True)
