"""The `rfthpc` command line.

Each sub-command lives in its own module under `rfthpc/commands/` and provides
`register(subparsers)`; this module finds them, dispatches, and turns `UserError`s into a message
and exit code 2. Commands that take a config accept dotted overrides after `--config FILE`, e.g.
`rfthpc submit --config grpo.yaml --algorithm.optimizer.lr 1e-6`; `--help` after `--config FILE`
lists every config flag with its documentation.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import rfthpc.commands
from rfthpc.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-command per module in `rfthpc/commands/`."""
    parser = argparse.ArgumentParser(
        prog="rfthpc",
        description="Asynchronous reinforcement fine-tuning of LLMs on Slurm, through a shared run directory.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(rfthpc.commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"rfthpc.commands.{info.name}").register(sub)
    return parser


def _split_config_help(argv: list[str]) -> tuple[list[str], list[str]]:
    """Move `-h/--help` given after `--config` to the overrides, so tyro documents the config flags."""
    if "--config" not in argv:
        return argv, []
    after = argv.index("--config")
    helps = [a for a in argv[after:] if a in ("-h", "--help")]
    if not helps:
        return argv, []
    return [a for i, a in enumerate(argv) if i < after or a not in ("-h", "--help")], helps


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code (2 for user errors, with a message and no traceback)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, helps = _split_config_help(argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "takes_overrides", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args.handler(args, rest + helps) or 0)
    except UserError as e:
        print(f"rfthpc: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("rfthpc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
