"""`rfthpc run --config FILE [--resume] [overrides]`: the whole run as local processes (no Slurm).

The roles are the commands a Slurm job would start (`rfthpc train`, `rfthpc explore`), on one
machine, writing the same run directory. A config with `mode: both` starts the trainer and its
explorers; the two halves of an asynchronous pair (`mode: train` and `mode: explore` with the
same project/name) are two `rfthpc run` commands, started in either order.
"""

from __future__ import annotations

import argparse
import shlex
import time

from rfthpc.commands import print_notes
from rfthpc.rundir.phases import PhaseLog, read_phases, report


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.config import load_config
    from rfthpc.config.schema import trains
    from rfthpc.errors import UserError
    from rfthpc.launch.local import plan_roles, run_local
    from rfthpc.launch.run_dir import prepare_run_dir

    if args.trainer_procs < 1:
        raise UserError(f"--trainer-procs {args.trainer_procs}: use 1 or more processes")
    if args.explorers is not None and args.explorers < 1:
        raise UserError(f"--explorers {args.explorers}: use 1 or more processes")
    loaded = load_config(args.config, overrides, prog=f"rfthpc run --config {args.config}")
    print_notes(loaded.notes)
    for stage in loaded.stages:
        split = stage.config.trainer.ulysses_sequence_parallel_size
        if trains(stage.config.mode) and args.trainer_procs % split:
            raise UserError(f"--trainer-procs {args.trainer_procs}: trainer.ulysses_sequence_parallel_size {split} "
                            f"(stage {stage.name!r}) splits each sequence over {split} trainer processes; give a "
                            "multiple of it")
    run = prepare_run_dir(loaded, resume=args.resume)
    roles = plan_roles(loaded.stages, run, trainer_procs=args.trainer_procs, explorers=args.explorers)
    print(f"rfthpc run: {run.root} ({', '.join(r.name for r in roles)}; logs in {run.log})", flush=True)
    start = time.monotonic()
    resume = " ".join(["rfthpc run --config", shlex.quote(args.config), *map(shlex.quote, overrides), "--resume"])
    phases = PhaseLog(run.root, "run")
    code = run_local(run, roles, {s.name: s.config.buffer.total_steps for s in loaded.stages}, resume,
                     phases=phases)
    if code == 0:
        print(f"rfthpc run: done in {time.monotonic() - start:.0f} s; metrics in {run.monitor}, "
              f"charts: `rfthpc plot {run.root}`", flush=True)
        # How long the roles took to start and to end (docs/performance.md#start-up-and-shutdown).
        phases.mark("returned")
        started = phases.times["roles_started"]
        roles = {role: marks for role, marks in read_phases(run.root, since=started).items() if role != "run"}
        for line in report(roles, started, phases.times["returned"]):
            print(f"rfthpc run: {line}", flush=True)
    return code


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `run` command."""
    p = sub.add_parser("run", help="run trainer and explorers as local processes (no Slurm)",
                       description="Run the roles of a config as local processes writing one run directory. "
                                   "Ctrl-C stops them cleanly; --resume continues.")
    p.add_argument("--config", required=True, help="YAML config file (Trinity-RFT shape)")
    p.add_argument("--resume", action="store_true",
                   help="continue an existing run directory (even with a changed config)")
    p.add_argument("--trainer-procs", type=int, default=1, help="trainer processes (torchrun --nproc-per-node)")
    p.add_argument("--explorers", type=int, default=None,
                   help="explorer processes (default: slurm.explorer.array_size)")
    p.set_defaults(handler=_run, takes_overrides=True)
