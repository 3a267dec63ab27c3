"""`rfthpc plot RUN_DIR`: reward, eval accuracy, staleness and throughput charts as PNG."""

from __future__ import annotations

import argparse
from pathlib import Path


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.errors import UserError
    from rfthpc.observe.plot import plot_run

    run_dir = Path(args.run_dir)
    if not (run_dir / "monitor").is_dir():
        raise UserError(f"{run_dir} is not a run directory (no monitor/ folder); "
                        "give <checkpoint_root_dir>/<project>/<name>")
    for path in plot_run(run_dir):
        print(path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `plot` command."""
    p = sub.add_parser("plot", help="write PNG charts of a run (reward, eval accuracy, staleness, throughput)")
    p.add_argument("run_dir", help="the run directory")
    p.set_defaults(handler=_run)
