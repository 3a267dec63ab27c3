"""Which checkpoints a path names, and which format each one is in.

A path may be a run directory (every `global_step_<N>/` below it), one `global_step_<N>/`, or a
path inside one (`…/global_step_<N>/actor`). Each role directory (`actor/`, `critic/`) holds one
of two formats, told apart by their files:

- rfthpc: `model/` (torch.distributed.checkpoint), `hf_config/`, `rfthpc_checkpoint.json`;
- veRL / Trinity-RFT FSDP: `model_world_size_<W>_rank_<R>.pt` (each rank's DTensor shards),
  `huggingface/` (config, tokenizer), `fsdp_config.json`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from rfthpc.errors import UserError
from rfthpc.sharedfs.fileops import is_temporary

STEP_DIR = re.compile(r"global_step_(\d+)")
ROLES = ("actor", "critic")

DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
}


def parse_dtype(name: str | None, what: str) -> torch.dtype | None:
    """The torch dtype named `bf16|fp16|fp32` (or their long names); None for None/`auto`."""
    if name is None or str(name) == "auto":
        return None
    key = str(name).removeprefix("torch.")
    if key not in DTYPES:
        raise UserError(f"{what}: dtype {name!r} is not one of bf16, fp16, fp32")
    return DTYPES[key]


@dataclass(frozen=True)
class StoredTensor:
    """A tensor of the checkpoint: its name, full (unsharded) shape and stored dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


class ShardedCheckpoint(Protocol):
    """A sharded model checkpoint that yields its full tensors one at a time."""

    format_name: str
    role_dir: Path

    def tensors(self) -> list[StoredTensor]:
        """Every tensor of the model, in checkpoint order."""
        ...

    def read(self, names: list[str]) -> Iterator[tuple[str, list[torch.Tensor]]]:
        """The tensors `names` in that order, each as row blocks (concatenated on dim 0 they are the
        full tensor); a yielded block must not be changed afterwards (it may be written later)."""
        ...

    def release(self, block: torch.Tensor) -> None:
        """Called once a row block yielded by `read` is written out (the writer works behind the
        reader), e.g. to hand a memory-mapped block's pages back to the kernel."""
        ...

    def training_dtype(self) -> torch.dtype | None:
        """The dtype the checkpoint records for the model, if any."""
        ...

    def config_dir(self) -> Path | None:
        """The directory in the checkpoint that holds config.json / tokenizer files, if any."""
        ...

    def close(self) -> None:
        """Release open files and mappings."""
        ...


def step_number(step_dir: Path) -> int:
    """N of a `global_step_<N>` directory."""
    m = STEP_DIR.fullmatch(step_dir.name)
    assert m, step_dir
    return int(m.group(1))


def find_step_dirs(path: str | Path) -> list[Path]:
    """The `global_step_<N>` directories `path` names (see the module docstring), oldest first."""
    p = Path(path).expanduser().absolute()
    if not p.exists():
        raise UserError(f"--checkpoint-dir {p} does not exist")
    for q in (p, *p.parents):
        if STEP_DIR.fullmatch(q.name):
            return [q]
    found: list[Path] = []
    if p.is_dir():
        for root, dirs, _ in os.walk(p):
            steps = [d for d in dirs if STEP_DIR.fullmatch(d)]
            found += [Path(root) / d for d in steps]
            # A step directory holds no further steps; hidden and temporary ones are not checkpoints.
            dirs[:] = [d for d in dirs if d not in steps and not d.startswith(".") and not is_temporary(d)]
    if not found:
        raise UserError(
            f"no checkpoint found in {p}: expected a run directory holding global_step_<N>/ directories, "
            "a global_step_<N> directory, or a path inside one"
        )
    return sorted(found, key=lambda d: (str(d.parent), step_number(d)))


def no_shards_error(role_dir: Path) -> UserError | None:
    """The error for a role directory that holds neither supported format (None if it holds one)."""
    from rfthpc.convert import rfthpc_dcp, verl_fsdp

    if rfthpc_dcp.is_rfthpc_checkpoint(role_dir) or verl_fsdp.is_verl_checkpoint(role_dir):
        return None
    return UserError(
        f"{role_dir}: no model shards found; expected model/ with a .metadata file (rfthpc) or "
        "model_world_size_<W>_rank_<R>.pt files (veRL / Trinity-RFT FSDP)"
    )


def open_checkpoint(role_dir: Path) -> ShardedCheckpoint:
    """Open the sharded model in `role_dir` in whichever supported format it is."""
    from rfthpc.convert import rfthpc_dcp, verl_fsdp

    if rfthpc_dcp.is_rfthpc_checkpoint(role_dir):
        return rfthpc_dcp.DcpCheckpoint(role_dir)
    if verl_fsdp.is_verl_checkpoint(role_dir):
        return verl_fsdp.VerlFsdpCheckpoint(role_dir)
    raise no_shards_error(role_dir)


def checkpoint_config_dir(role_dir: Path) -> Path | None:
    """Where the checkpoint in `role_dir` keeps a config.json (its own dir, or `huggingface/`), if anywhere."""
    from rfthpc.convert import rfthpc_dcp, verl_fsdp

    for candidate in (rfthpc_dcp.config_dir_of(role_dir), verl_fsdp.config_dir_of(role_dir)):
        if (candidate / "config.json").is_file():
            return candidate
    return None
