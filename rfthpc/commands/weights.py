"""`rfthpc weights list|materialize RUN_DIR`: the published policy versions, and any of them as a
Hugging Face model directory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rfthpc.errors import UserError


def _list(run_dir: Path, as_json: bool) -> None:
    from rfthpc.weights import published

    full, deltas = published.published_versions(run_dir)
    latest = published.read_latest(run_dir)
    rows = []
    for v in sorted(full | deltas):
        size = sum(p.stat().st_size for p in published.step_dir(run_dir, v).glob("*.safetensors")) if v in full else 0
        delta = published.delta_file(run_dir, v)
        rows.append({"version": v, "full_mb": round(size / 1e6, 2) if v in full else None,
                     "delta_mb": round(delta.stat().st_size / 1e6, 3) if v in deltas else None,
                     "latest": v == latest})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        print(f"no published versions under {run_dir / 'weights'}")
        return
    print(f"{'version':>8}  {'full MB':>10}  {'delta MB':>10}")
    for r in rows:
        print(f"{r['version']:>8}  {r['full_mb'] if r['full_mb'] is not None else '-':>10}  "
              f"{r['delta_mb'] if r['delta_mb'] is not None else '-':>10}{'  (latest)' if r['latest'] else ''}")


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.weights import chain as weight_chain

    run_dir = Path(args.run_dir)
    if not (run_dir / "weights").is_dir():
        raise UserError(f"{run_dir} has no weights/ directory; pass a run directory the trainer has published to")
    if args.action == "list":
        _list(run_dir, args.json)
        return 0
    if args.version is None or args.out is None:
        raise UserError("weights materialize needs --version N and --out DIR")
    chain = weight_chain.materialize(run_dir, args.version, Path(args.out))
    how = (f"full snapshot {chain.start}" if chain.from_full else f"version {chain.start}") + \
        (f" + deltas {list(chain.deltas)}" if chain.deltas else "")
    print(f"wrote version {args.version} to {args.out} (from {how})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `weights` command."""
    p = sub.add_parser("weights", help="list a run's published policy versions, or write one as a Hugging Face "
                                       "model directory")
    p.add_argument("action", choices=["list", "materialize"],
                   help="list: every published version (full snapshot, delta, sizes); materialize: rebuild "
                        "--version N (from its full snapshot and deltas, checked bit for bit) into --out DIR")
    p.add_argument("run_dir", help="the run directory")
    p.add_argument("--version", type=int, help="materialize: the policy version (trainer step) to write")
    p.add_argument("--out", help="materialize: a new directory for the Hugging Face model")
    p.add_argument("--json", action="store_true", help="list: print JSON")
    p.set_defaults(handler=_run)
