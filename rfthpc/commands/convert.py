"""`rfthpc convert --checkpoint-dir D [--base-model-dir B] [--force] [--dtype …] [--role …]`."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.convert.cli import run

    return run(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `convert` command."""
    from rfthpc.convert.cli import DESCRIPTION, add_arguments

    p = sub.add_parser(
        "convert", help="merge sharded trainer checkpoints into Hugging Face models", description=DESCRIPTION
    )
    add_arguments(p)
    p.set_defaults(handler=_run)
