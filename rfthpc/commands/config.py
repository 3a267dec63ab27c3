"""`rfthpc config show|validate --config FILE [overrides]`."""

from __future__ import annotations

import argparse

from rfthpc.commands import print_notes


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.config import dump_yaml, load_config

    loaded = load_config(args.config, overrides, check_paths=not args.no_path_checks,
                         prog=f"rfthpc config {args.action} --config {args.config}")
    print_notes(loaded.notes)
    if args.action == "show":
        if loaded.base.stages:
            for stage in loaded.stages:
                print(f"# --- stage {stage.name}")
                print(dump_yaml(stage.config))
        else:
            print(dump_yaml(loaded.config), end="")
        return 0
    names = ", ".join(s.name for s in loaded.stages)
    print(f"{args.config}: valid ({len(loaded.stages)} stage{'s' if len(loaded.stages) > 1 else ''}: {names})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `config` command."""
    p = sub.add_parser("config", help="show or validate a config (with overrides)")
    p.add_argument("action", choices=["show", "validate"], help="show: print the resolved YAML; validate: check it")
    p.add_argument("--config", required=True, help="YAML config file (Trinity-RFT shape)")
    p.add_argument("--no-path-checks", action="store_true",
                   help="do not require model and dataset paths to exist here (a config for another machine)")
    p.set_defaults(handler=_run, takes_overrides=True)
