"""veRL / Trinity-RFT FSDP checkpoints: one `torch.save`d state dict of local shards per rank.

veRL's FSDPCheckpointManager writes, for world size W, `model_world_size_W_rank_R.pt` on every
rank R: the FSDP sharded state dict, whose values are DTensors (FSDP2, or FSDP1 with a device
mesh) holding that rank's piece (`Shard(0)` over the `fsdp` mesh dimension, `Replicate()` over a
`ddp` one for HSDP). Rank 0 adds `huggingface/` (config, generation config, tokenizer) and
`fsdp_config.json` (`{"FSDP_version", "world_size"}`).

The files are opened with `mmap=True`, so only the pickled structure is read up front; a tensor's
bytes are paged in when it is merged and handed back to the kernel right after, which keeps the
resident memory near one tensor rather than the model.
"""

from __future__ import annotations

import ctypes
import json
import logging
import mmap
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from rfthpc.convert.formats import StoredTensor
from rfthpc.errors import UserError

RANK_FILE = re.compile(r"model_world_size_(\d+)_rank_(\d+)\.pt")
FSDP_CONFIG = "fsdp_config.json"
HF_DIR = "huggingface"


def is_verl_checkpoint(role_dir: Path) -> bool:
    """True if `role_dir` holds veRL-style `model_world_size_<W>_rank_<R>.pt` files."""
    return role_dir.is_dir() and any(RANK_FILE.fullmatch(p.name) for p in role_dir.iterdir())


def config_dir_of(role_dir: Path) -> Path:
    """The directory of a veRL checkpoint that holds config.json and the tokenizer."""
    return role_dir / HF_DIR


def _rank_files(role_dir: Path) -> tuple[int, list[Path]]:
    """The world size and the rank files 0..W-1, checked for mixed world sizes and gaps."""
    found: dict[int, dict[int, Path]] = {}
    for p in role_dir.iterdir():
        m = RANK_FILE.fullmatch(p.name)
        if m:
            found.setdefault(int(m.group(1)), {})[int(m.group(2))] = p
    if len(found) > 1:
        names = ", ".join(f"model_world_size_{w}_rank_*.pt" for w in sorted(found))
        raise UserError(
            f"{role_dir} mixes shards of different world sizes ({names}); remove the files that belong to another save"
        )
    ((world_size, ranks),) = found.items()
    fsdp_config = role_dir / FSDP_CONFIG
    if fsdp_config.is_file():
        try:
            recorded = json.loads(fsdp_config.read_text()).get("world_size")
        except ValueError as e:
            raise UserError(f"{fsdp_config} is not valid JSON ({e}); the file is truncated or corrupt") from None
        if recorded is not None and recorded != world_size:
            raise UserError(
                f"{fsdp_config} says world_size {recorded} but the shards are model_world_size_{world_size}_rank_*.pt: "
                "they belong to another save"
            )
    missing = [role_dir / f"model_world_size_{world_size}_rank_{r}.pt" for r in range(world_size) if r not in ranks]
    if missing:
        raise UserError(f"missing shard {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    extra = sorted(r for r in ranks if r >= world_size)
    if extra:
        raise UserError(f"{ranks[extra[0]]} names rank {extra[0]}, but the world size is {world_size}: remove it")
    return world_size, [ranks[r] for r in range(world_size)]


def _load(path: Path) -> Mapping[str, torch.Tensor]:
    # The DeviceMesh inside each DTensor warns that it was unpickled without process groups;
    # merging needs none.
    mesh_log = logging.getLogger("torch.distributed.device_mesh")
    level = mesh_log.level
    mesh_log.setLevel(logging.ERROR)
    try:
        # veRL pickles DTensors and device meshes, which weights_only refuses: only open files you trust.
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as e:  # noqa: BLE001 — a damaged zip or pickle raises many kinds
        raise UserError(f"{path} cannot be read ({type(e).__name__}: {e}); the file is truncated or corrupt") from None
    finally:
        mesh_log.setLevel(level)
    if not isinstance(state, Mapping):
        raise UserError(
            f"{path} holds a {type(state).__name__}, not a model state dict (veRL's model_world_size_<W>_rank_<R>.pt)"
        )
    odd = next((f"{k}: {type(v).__name__}" for k, v in state.items() if not isinstance(v, torch.Tensor)), None)
    if odd is not None:
        raise UserError(
            f"{path} holds {odd}; only DTensor shards (FSDP2, or FSDP1 with a device mesh) "
            "and plain tensors can be merged"
        )
    return state


class _PageDropper:
    """Returns the pages of memory-mapped shard files to the kernel once a tensor is merged.

    `madvise(MADV_DONTNEED)` on a read-only file mapping only unmaps pages (they are re-read from
    the file if touched again), but on ordinary memory it would discard data; so it is applied
    only to address ranges that /proc/self/maps shows as mappings of the shard files.
    """

    def __init__(self, files: list[Path]) -> None:
        self.ranges: list[tuple[int, int]] = []
        self.libc = None
        names = {str(p.resolve()) for p in files}
        try:
            with open("/proc/self/maps") as f:
                for line in f:
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6 and parts[5].strip() in names:
                        lo, hi = (int(x, 16) for x in parts[0].split("-"))
                        self.ranges.append((lo, hi))
            self.libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            self.ranges = []  # No /proc (not Linux): pages stay mapped, which costs memory, not correctness.

    def drop(self, tensor: torch.Tensor) -> None:
        """Unmap the pages behind `tensor` if they lie inside a shard file mapping."""
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()
        for lo, hi in self.ranges:
            if lo <= start and end <= hi:
                page_lo = start - start % mmap.PAGESIZE
                page_hi = min(hi, end + (-end % mmap.PAGESIZE))
                self.libc.madvise(ctypes.c_void_p(page_lo), ctypes.c_size_t(page_hi - page_lo), mmap.MADV_DONTNEED)
                return


def _joined_shape(pieces: list[torch.Tensor], dim: int) -> tuple[int, ...] | None:
    """The shape of `pieces` concatenated along `dim` (None if they do not fit together)."""
    first = tuple(pieces[0].shape)
    if not first:
        return first if len(pieces) == 1 else None
    for p in pieces:
        if p.dim() != len(first) or any(p.shape[i] != first[i] for i in range(len(first)) if i != dim):
            return None
    return first[:dim] + (sum(p.shape[dim] for p in pieces),) + first[dim + 1 :]


class VerlFsdpCheckpoint:
    """A veRL / Trinity-RFT FSDP checkpoint's model, merged one tensor at a time."""

    format_name = "veRL/Trinity-RFT FSDP (model_world_size_W_rank_R.pt)"

    def __init__(self, role_dir: Path) -> None:
        from torch.distributed.tensor import DTensor

        self.role_dir = Path(role_dir)
        self.world_size, self.files = _rank_files(self.role_dir)
        self.states = [_load(p) for p in self.files]
        self.coords: list[tuple[int, ...] | None] = []
        for rank, (path, state) in enumerate(zip(self.files, self.states)):
            self.coords.append(self._coordinate(rank, path, state, DTensor))
        keys = list(self.states[0])
        for path, state in zip(self.files[1:], self.states[1:]):
            if set(state) != set(keys):
                diff = sorted(set(state) ^ set(keys))
                raise UserError(
                    f"{path} holds other tensors than {self.files[0].name} (e.g. {diff[0]}): it belongs to another save"
                )
        self._tensors = [StoredTensor(k, tuple(v.shape), v.dtype) for k, v in self.states[0].items()]
        self._pages = _PageDropper(self.files)

    def _coordinate(
        self, rank: int, path: Path, state: Mapping[str, torch.Tensor], dtensor_type
    ) -> tuple[int, ...] | None:
        """The saving rank's coordinate in the device mesh, checked against the file name."""
        sample = next((v for v in state.values() if isinstance(v, dtensor_type)), None)
        if sample is None:
            return None
        mesh = sample.device_mesh
        if mesh.size() != self.world_size:
            raise UserError(
                f"{path} was saved by a run of world size {mesh.size()}, not {self.world_size} as its name says: "
                "it belongs to another save"
            )
        coord = mesh.get_coordinate()
        saved_by = None if coord is None else int(mesh.mesh[tuple(coord)])
        if saved_by != rank:
            raise UserError(f"{path} holds the shard of rank {saved_by}, not rank {rank}: it belongs to another save")
        return tuple(coord)

    def tensors(self) -> list[StoredTensor]:
        """Every tensor of the model, in rank 0's state-dict order (full shapes)."""
        return list(self._tensors)

    def read(self, names: list[str]) -> Iterator[tuple[str, Iterator[torch.Tensor]]]:
        """Tensors `names` in order, as their ranks' pieces (joined first if not sharded on dim 0)."""
        for name in names:
            pieces, dim = self._pieces(name)
            expected = tuple(self.states[0][name].shape)
            if _joined_shape(pieces, dim) != expected:
                raise UserError(
                    f"{self.role_dir}: the pieces of {name} ({[tuple(p.shape) for p in pieces]}) do not make up its "
                    f"shape {expected}: a shard file belongs to another save"
                )
            yield name, self._blocks(pieces, dim)

    def _blocks(self, pieces: list[torch.Tensor], dim: int) -> Iterator[torch.Tensor]:
        """Row blocks of one tensor: the pieces themselves (their pages go back to the kernel in
        `release`, once written), or, for pieces split along another dimension, their join."""
        if dim == 0:
            yield from pieces
        else:
            yield torch.cat(pieces, dim=dim)
            for p in pieces:
                self._pages.drop(p)

    def _pieces(self, name: str) -> tuple[list[torch.Tensor], int]:
        """The local tensors that make up `name`, in order, and the dimension to join them on."""
        from torch.distributed.tensor import DTensor, Replicate, Shard

        first = self.states[0][name]
        if not isinstance(first, DTensor):
            return [first], 0  # a plain tensor in a sharded state dict is a replicated buffer
        shard_dims = []
        for mesh_dim, placement in enumerate(first.placements):
            if type(placement) is Shard:
                shard_dims.append((mesh_dim, placement.dim))
            elif not isinstance(placement, Replicate):
                raise UserError(
                    f"{self.files[0]}: {name} is placed as {first.placements}; only FSDP/HSDP sharding "
                    "(Shard(d) on one mesh dimension, Replicate on the others) can be merged"
                )
        if not shard_dims:
            return [first.to_local()], 0
        if len(shard_dims) > 1:
            raise UserError(
                f"{self.files[0]}: {name} is sharded on {len(shard_dims)} mesh dimensions (tensor parallel?); "
                "only FSDP/HSDP checkpoints can be merged"
            )
        ((mesh_dim, tensor_dim),) = shard_dims
        holders = []
        for rank, coord in enumerate(self.coords):
            if coord is not None and all(c == 0 for i, c in enumerate(coord) if i != mesh_dim):
                holders.append((coord[mesh_dim], rank))
        pieces = []
        for _, rank in sorted(holders):
            value = self.states[rank][name]
            if not isinstance(value, DTensor):
                raise UserError(f"{self.files[rank]}: {name} is not sharded there but is in {self.files[0].name}")
            pieces.append(value.to_local())
        return pieces, tensor_dim

    def training_dtype(self) -> torch.dtype | None:
        """veRL records no training dtype beside the model config (see config.json)."""
        return None

    def config_dir(self) -> Path | None:
        """`huggingface/` when it holds a config.json."""
        d = config_dir_of(self.role_dir)
        return d if (d / "config.json").is_file() else None

    def release(self, block: torch.Tensor) -> None:
        """Hand the pages of a written piece back to the kernel (a joined block owns its memory)."""
        self._pages.drop(block)

    def close(self) -> None:
        """Drop the state dicts, which unmaps the shard files."""
        self.states = []
