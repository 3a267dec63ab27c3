"""`rfthpc make-data --out DIR [--format ...]`: synthetic GSM8K-format arithmetic data."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from rfthpc.demos.synth_gsm8k import main

    return main(rest)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `make-data` command (its flags are documented by `rfthpc make-data --help`)."""
    p = sub.add_parser("make-data", help="write synthetic GSM8K-format data (jsonl, json, parquet, HF dirs)",
                       add_help=False)
    p.set_defaults(handler=_run, takes_overrides=True)
