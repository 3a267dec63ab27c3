"""`rfthpc train --run-dir R`: the trainer role (one process per GPU under torchrun or srun)."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.signals import exit_process
    from rfthpc.trainer.loop import run_trainer

    # Every rank runs the same loop: rank 0 reports progress, the others only problems.
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s")
    exit_process(run_trainer(Path(args.run_dir), args.node_local_weights, args.time_share_gpus))


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `train` command."""
    p = sub.add_parser(
        "train",
        help="run the trainer of a run directory (exit 0: done, 124: stopped by SIGTERM/SIGUSR2, requeue it)",
        description="Train on the experience (or SFT data) of the run in --run-dir, stage after stage, resuming "
                    "from its newest checkpoint. Several processes: launch under torchrun or srun.",
    )
    p.add_argument("--run-dir", required=True, help="the run directory (holds config.yaml)")
    p.add_argument("--node-local-weights", action="store_true",
                   help="explorers run on this node (a colocated job, `rfthpc run`): also leave each published "
                        "version in node-local memory (filesystem.staging_dir) for them to load")
    p.add_argument("--time-share-gpus", action="store_true",
                   help="take turns on this node's GPUs with the explorers on them (a colocated job with "
                        "explorer.rollout_model.enable_sleep_mode): the trainer's weights and optimizer state "
                        "go to CPU memory while it waits for experience")
    p.set_defaults(handler=_run)
