"""`rfthpc make-demo [--task arith|frozenlake] [--out DIR] [--seed 0]`: a CPU demo's model and data, made offline."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rfthpc.errors import UserError

DEMO_TASKS = ("arith", "frozenlake")
"""`rfthpc make-demo --task`: the arithmetic demo (configs/tiny-cpu.yaml) or the agentic one
(configs/frozenlake-cpu.yaml, `rfthpc.demos.frozenlake`)."""


def split_task(argv: Sequence[str]) -> tuple[str, list[str]]:
    """(the `--task` given, default arith; the other arguments). Each demo has its own flags, so
    the task is read before the rest is parsed."""
    task, rest, args = DEMO_TASKS[0], [], list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--task" or arg.startswith("--task="):
            if arg == "--task" and not args:
                raise UserError(f"make-demo --task: name one of {', '.join(DEMO_TASKS)}")
            task = args.pop(0) if arg == "--task" else arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if task not in DEMO_TASKS:
        raise UserError(f"make-demo --task {task}: choose one of {', '.join(DEMO_TASKS)}")
    return task, rest


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    task, rest = split_task(rest)
    if task == "frozenlake":
        from rfthpc.demos.frozenlake import main
    else:
        from rfthpc.demos.gsm8k import main
    return main(rest)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `make-demo` command (its flags are documented by `rfthpc make-demo --help`)."""
    p = sub.add_parser("make-demo", help="write a CPU demo's model and data (configs/tiny-cpu.yaml; --task frozenlake: configs/frozenlake-cpu.yaml)",
                       add_help=False)
    p.set_defaults(handler=_run, takes_overrides=True)

