"""`rfthpc explore --run-dir R [--name N] [--rank K]`: one explorer process (a Slurm array task or local process).

It reads `R/explorers/<N>/config.yaml` if that exists (explorers added mid-run with their own
config), else `R/config.yaml`, and sets that config's `explorer.env_vars` in its environment before
the explorer's modules are imported. `--rank` defaults to `$SLURM_ARRAY_TASK_ID`, else 0. Exit codes:
0 done, 124 stopped by SIGTERM/SIGUSR2 (requeue), 2 a user error (bad input, sync timeout), 1 an engine failed.
"""

from __future__ import annotations

import argparse
import logging
import os

from rfthpc.errors import UserError
from rfthpc.rundir.paths import RunDir
from rfthpc.signals import exit_process


def default_rank() -> int:
    """`$SLURM_ARRAY_TASK_ID` (the array task index), else 0."""
    value = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
    try:
        return int(value)
    except ValueError:
        raise UserError(f"SLURM_ARRAY_TASK_ID={value!r} is not an integer; pass --rank explicitly") from None


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.config import load_resolved
    from rfthpc.config.settings import explorer_settings

    run = RunDir(args.run_dir)
    path = run.role_config(args.name)
    if not path.is_file():
        raise UserError(
            f"{path} does not exist; pass the run directory `rfthpc submit` or `rfthpc run` created "
            "(and --name for an explorer array with its own config)"
        )
    loaded = load_resolved(path)
    settings = explorer_settings(loaded.stages)
    # Before the explorer's modules are imported: some libraries read their variables on import.
    os.environ.update(settings.env_vars)
    from rfthpc.explorer.loop import Explorer

    name = args.name or loaded.config.explorer.name
    rank = default_rank() if args.rank is None else args.rank
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format=f"%(asctime)s %(levelname)s [explorer {name}/{rank}] %(name)s: %(message)s",
    )
    # math-verify warns on every call made outside the main thread (workflows run in runner
    # threads, where its SIGALRM timeouts cannot work); once per response drowns the log.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    exit_process(Explorer(run.root, name, rank, settings, process_ends=True,
                          time_share_gpus=args.time_share_gpus).run())


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `explore` command."""
    p = sub.add_parser("explore", help="run one explorer process (rollouts into the run directory)")
    p.add_argument("--run-dir", required=True, help="the run directory (holds config.yaml)")
    p.add_argument("--name", default=None, help="explorer array name (default: explorer.name of the config)")
    p.add_argument("--rank", type=int, default=None, help="array task index (default: $SLURM_ARRAY_TASK_ID or 0)")
    p.add_argument("--time-share-gpus", action="store_true",
                   help="take turns on this process's GPUs with the trainer on them (a colocated job with "
                        "explorer.rollout_model.enable_sleep_mode): the engines sleep while the trainer steps")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="logging level")
    p.set_defaults(handler=_run)
