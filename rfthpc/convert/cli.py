"""Command-line front of the converter, shared by `rfthpc convert` and `tools/convert_checkpoint.py`.

Only argparse at import time: torch and transformers load when a conversion runs.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from rfthpc.errors import UserError

DESCRIPTION = (
    "Merge sharded trainer checkpoints (rfthpc's own, or veRL/Trinity-RFT FSDP "
    "model_world_size_W_rank_R.pt) into Hugging Face model directories at global_step_<N>/<role>/huggingface/."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the converter's options to `p`."""
    p.add_argument(
        "--checkpoint-dir",
        required=True,
        type=Path,
        help="a run directory (converts every global_step_<N>), one global_step_<N>, or a path inside one",
    )
    p.add_argument(
        "--base-model-dir",
        type=Path,
        default=None,
        help="model directory supplying config.json and tokenizer files where a checkpoint lacks them",
    )
    p.add_argument(
        "--force", action="store_true", help="convert again even where huggingface/ already holds complete weights"
    )
    p.add_argument(
        "--dtype",
        choices=["bf16", "fp16", "fp32"],
        default=None,
        help="dtype of the written weights (default: the training dtype the checkpoint records, else config.json's)",
    )
    p.add_argument(
        "--role",
        choices=["actor", "critic", "all"],
        default="actor",
        help="which model of each step to convert (default: actor)",
    )
    p.add_argument(
        "--max-shard-size",
        default="5GB",
        help="largest safetensors file; bigger models are split and indexed (default: 5GB)",
    )
    p.add_argument(
        "--adapter-only",
        action="store_true",
        help="LoRA runs: export the adapter (PEFT layout) to <role>/lora_adapter/ instead of merging it into the "
        "base model (the base's weights come from --base-model-dir, else the adapter config's base model)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _interrupt(signum: int, frame: object) -> None:
    # Turned into an exception so that the conversion in progress removes its temporary output.
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    """Convert as `args` say; print one line per checkpoint; raise UserError if any failed."""
    from rfthpc.convert.merge import ConvertOptions, Outcome, convert_checkpoints, roles_for
    from rfthpc.weights.safetensors_write import parse_size

    options = ConvertOptions(
        base_model_dir=args.base_model_dir,
        force=args.force,
        dtype=args.dtype,
        roles=roles_for(args.role),
        max_shard_size=parse_size(args.max_shard_size),
        progress=not args.no_progress,
        adapter_only=args.adapter_only,
    )

    def report(o: Outcome) -> None:
        if o.status == "failed":
            return  # summarised in the error below
        print(f"{o.role_dir}: {o.status}: {o.detail}", flush=True)
        for note in o.notes:
            print(f"{o.role_dir}: note: {note}", flush=True)

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        outcomes = convert_checkpoints(args.checkpoint_dir, options, report)
    finally:
        signal.signal(signal.SIGTERM, previous)
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        lines = "\n".join(f"  {o.role_dir}: {o.detail}" for o in failed)
        raise UserError(f"{len(failed)} of {len(outcomes)} checkpoint(s) not converted:\n{lines}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point (tools/convert_checkpoint.py): parse, run, report user errors."""
    parser = argparse.ArgumentParser(prog="convert_checkpoint.py", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UserError as e:
        print(f"convert: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("convert: interrupted", file=sys.stderr)
        return 130
