"""`rfthpc config show|validate --config FILE [overrides]`."""

from __future__ import annotations

import argparse
from typing import Any

from rfthpc.commands import print_notes


def _flow(value: Any) -> str:
    """`value` as YAML on one line."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def _value_at(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


def provenance(loaded: Any) -> list[str]:
    """YAML comment lines naming each rfthpc setting read from another framework's key, and that key
    (only those the shown config still holds: a command-line override may have replaced one)."""
    configs = {stage.name: stage.config for stage in loaded.stages}
    lines = []
    for m in loaded.mapped:
        held = _value_at(configs.get(m.stage) if m.stage else loaded.base, m.target)
        if held != m.value:
            continue
        where = f" (stage {m.stage})" if m.stage else ""
        line = f"#   {m.target}: {_flow(m.value)}  <- {m.framework} {m.source}{where}"
        if line not in lines:
            lines.append(line)
    return ["# Read from other frameworks' keys (rfthpc key: value  <- their key):", *lines] if lines else []


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.config import dump_yaml, load_config

    loaded = load_config(args.config, overrides, check_paths=not args.no_path_checks,
                         prog=f"rfthpc config {args.action} --config {args.config}")
    print_notes(loaded.notes)
    if args.action == "show":
        for line in provenance(loaded):
            print(line)
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
    p.add_argument("action", choices=["show", "validate"],
                   help="show: print the resolved YAML, first listing the values read from other frameworks' keys; "
                        "validate: check it")
    p.add_argument("--config", required=True, help="YAML config file (Trinity-RFT shape)")
    p.add_argument("--no-path-checks", action="store_true",
                   help="do not require model and dataset paths to exist here (a config for another machine)")
    p.set_defaults(handler=_run, takes_overrides=True)
