"""`rfthpc tiny-model --out DIR [--size tiny|small|bench30m]`: a small Qwen2 model made offline."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from rfthpc.demos.tinymodel import main

    return main(rest)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `tiny-model` command (its flags are documented by `rfthpc tiny-model --help`)."""
    p = sub.add_parser("tiny-model", help="build a small Qwen2 model + tokenizer offline (tests, demo, benchmarks)",
                       add_help=False)
    p.set_defaults(handler=_run, takes_overrides=True)
