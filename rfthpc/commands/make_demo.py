"""`rfthpc make-demo [--task arith|frozenlake] [--out DIR] [--seed 0]`: a CPU demo's model and data, made offline."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from rfthpc.demos.gsm8k import main

    return main(rest)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `make-demo` command (its flags are documented by `rfthpc make-demo --help`)."""
    p = sub.add_parser("make-demo", help="write a CPU demo's model and data (configs/tiny-cpu.yaml; --task frozenlake: configs/frozenlake-cpu.yaml)",
                       add_help=False)
    p.set_defaults(handler=_run, takes_overrides=True)
