"""`rfthpc config show|validate --config FILE [overrides]` and `rfthpc config import --from roll|verl FILE`."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
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


def _import(args: argparse.Namespace, later: list[str]) -> int:
    from rfthpc.config import load_config
    from rfthpc.dialects.roll_import import import_roll
    from rfthpc.dialects.translation import write_jsonl
    from rfthpc.dialects.verl_import import import_verl
    from rfthpc.errors import ConfigError

    # Overrides may also follow the options (`FILE --script run.sh key=value`); argparse leaves those over.
    options = [a for a in later if a.startswith("-")]
    if options:
        raise ConfigError(f"unrecognized arguments: {' '.join(options)}")
    overrides = [*args.overrides, *later]
    out = Path(args.out) if args.out else None
    tasks_dir = out.resolve().with_name(out.stem + ".tasks") if out else None
    if args.source_format == "verl":
        imported = import_verl(args.file, overrides, ignore=args.ignore, script=args.script)
    elif args.script:
        raise ConfigError("--script reads a veRL launch script; a ROLL config takes its overrides after the file")
    else:
        imported = import_roll(args.file, tasks_dir, ignore=args.ignore, overrides=overrides)
    for path, rows in imported.tasksets.items():
        write_jsonl(path, rows)
    where = out.resolve().parent if out else Path(tempfile.gettempdir())
    fd, tmp = tempfile.mkstemp(prefix=".rfthpc-import-", suffix=".yaml", dir=where)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(imported.text)
        try:
            loaded = load_config(tmp, check_paths=False)
        except ConfigError as e:
            raise ConfigError(f"the config imported from {args.file} fails rfthpc's checks: {e}") from None
        print_notes(imported.notes + loaded.notes)
        if out is None:
            sys.stdout.write(imported.text)
            return 0
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    files = f"; tasksets in {tasks_dir}" if imported.tasksets else ""
    print(f"{out}: imported from {args.file}, valid ({len(imported.notes)} notes in its header{files})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `config` command."""
    p = sub.add_parser("config", help="show, validate or import a config")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in (("show", "print the resolved YAML, first listing the values read from other frameworks' keys"),
                         ("validate", "check a config")):
        a = actions.add_parser(action, help=text, description=f"{text.capitalize()}; dotted config overrides "
                                                              "(--buffer.batch_size 32) may follow")
        a.add_argument("--config", required=True, help="YAML config file (Trinity-RFT shape)")
        a.add_argument("--no-path-checks", action="store_true",
                       help="do not require model and dataset paths to exist here (a config for another machine)")
        a.set_defaults(handler=_run, takes_overrides=True)
    i = actions.add_parser(
        "import", help="turn a ROLL config or a veRL run into an rfthpc config",
        description="Translate a ROLL pipeline config (RLVR or agentic), or a veRL run (its Hydra config, e.g. "
                    "verl/trainer/config/ppo_trainer.yaml, with the overrides of its launch script), following "
                    "Hydra's defaults: includes, into an rfthpc config that says where each value came from; "
                    "settings rfthpc cannot reproduce are errors, listed together (docs/migration.md).")
    i.add_argument("--from", dest="source_format", required=True, choices=["roll", "verl"],
                   help="the config's format")
    i.add_argument("file", help="the ROLL YAML config; for veRL its Hydra config, or its launch script (.sh), whose "
                                "config is then read from the veRL installed in this Python")
    i.add_argument("overrides", nargs="*", help="Hydra overrides applied before the import (key=value, +key=value, "
                                                "~key); with a veRL script, at its $@ (or after its own)")
    i.add_argument("--script", metavar="RUN.sh",
                   help="veRL: the launch script whose veRL command's overrides apply to FILE (variables it does not "
                        "set are read from the environment)")
    i.add_argument("--out", help="write the rfthpc config here (and an agentic config's tasksets of environment "
                                 "seeds in OUT's name + .tasks/); default: print it")
    i.add_argument("--ignore", action="append", default=[], metavar="KEY",
                   help="import without this refused ROLL or veRL key (or section), accepting that the run differs; "
                        "repeatable")
    i.set_defaults(handler=_import, takes_overrides=True)
