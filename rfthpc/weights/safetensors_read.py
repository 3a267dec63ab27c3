"""Reading a directory of safetensors files (a published snapshot, a staged version) tensor by tensor.

A process that will load a directory soon can map it ahead (`premap`, from a background thread):
`iter_safetensors_dir` in that process then returns tensors over the mapping already made, whose
pages are already in the page tables, so an in-place load is a plain memory copy. The explorer's
prefetcher does this for the version it staged (in-process engines: transformers, vLLM on CPU).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rfthpc.errors import UserError


class SafetensorsDir:
    """The tensors of `path/*.safetensors` (one file or the shards of a sharded checkpoint), by name,
    as torch tensors that view the memory-mapped files: copying them into a model or another file
    is then the only copy of the bytes. A tensor stays valid after its file is deleted."""

    def __init__(self, path: Path) -> None:
        from rfthpc.weights.safetensors_write import DTYPES_BY_NAME, read_header

        self.path = Path(path)
        files = sorted(self.path.glob("*.safetensors"))
        if not files:
            raise UserError(f"weights directory {path} holds no *.safetensors files; publish a complete HF directory")
        self._where: dict[str, tuple[mmap.mmap, Any, list[int], int, int]] = {}
        for file in files:
            with open(file, "rb") as f:
                # Read-ahead: on Lustre or NFS, page faults on the mapping would fetch the file in small pieces.
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_WILLNEED)
                try:
                    start, header = read_header(f)
                    # A private mapping: writable, so torch accepts it, and never written back to the file.
                    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
                    for name, info in sorted(((n, i) for n, i in header.items() if n != "__metadata__"),
                                             key=lambda item: item[1]["data_offsets"][0]):
                        begin, end = info["data_offsets"]
                        self._where[name] = (data, DTYPES_BY_NAME[info["dtype"]], info["shape"], start + begin,
                                             end - begin)
                except (ValueError, KeyError, TypeError, struct.error) as e:
                    raise UserError(f"{file} is not a readable safetensors file ({type(e).__name__}: {e}); "
                                    "publish the weights again") from e

    def names(self) -> list[str]:
        """Tensor names, file by file in the order of their bytes."""
        return list(self._where)

    def entries(self) -> list[Any]:
        """A `TensorEntry` (name, shape, dtype) per tensor, in `names()` order."""
        from rfthpc.weights.safetensors_write import TensorEntry

        return [TensorEntry(n, tuple(shape), dtype) for n, (_, dtype, shape, _, _) in self._where.items()]

    def tensor(self, name: str) -> Any:
        """Tensor `name`, viewing the mapped file (KeyError if there is none)."""
        import torch

        data, dtype, shape, offset, nbytes = self._where[name]
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(data, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).view(shape)

    def touch(self) -> None:
        """Read one byte of every page, so the mappings' page tables are filled now rather than on
        first use (the kernel then maps each page once, here, not during a later copy)."""
        import numpy as np

        for data in {id(w[0]): w[0] for w in self._where.values()}.values():
            int(np.frombuffer(data, dtype=np.uint8)[::mmap.PAGESIZE].sum())

    def close(self) -> None:
        """Forget the mappings (each goes once no tensor views it)."""
        self._where.clear()


_premapped: dict[Path, SafetensorsDir] = {}
_premapped_lock = threading.Lock()


def premap(path: Path) -> None:
    """Map `path` in this process and fill its page tables (see the module docstring)."""
    files = SafetensorsDir(path)
    files.touch()
    with _premapped_lock:
        _premapped[Path(path).resolve()] = files


def forget(path: Path) -> None:
    """Drop this process's premapped copy of `path` (before the directory is removed)."""
    with _premapped_lock:
        _premapped.pop(Path(path).resolve(), None)


def iter_safetensors_dir(path: Path) -> Iterator[tuple[str, Any]]:
    """Every tensor of `path/*.safetensors` (see `SafetensorsDir`), file by file; from the mapping
    `premap` made if this process made one."""
    with _premapped_lock:
        files = _premapped.get(Path(path).resolve())
    if files is None:
        files = SafetensorsDir(path)
    for name in files.names():
        yield name, files.tensor(name)
