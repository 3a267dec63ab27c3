"""Reading a published step directory (`weights/step_N/*.safetensors`) tensor by tensor."""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rfthpc.errors import UserError


def iter_safetensors_dir(path: Path) -> Iterator[tuple[str, Any]]:
    """Every tensor of `path/*.safetensors` (one file or the shards of a sharded checkpoint), file by
    file, as torch tensors that view the memory-mapped files: loading them into a model is then
    the only copy of the bytes. A tensor stays valid after its file is deleted."""
    import torch

    from rfthpc.convert.writer import DTYPES_BY_NAME, read_header

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise UserError(f"weights directory {path} holds no *.safetensors files; publish a complete HF directory")
    for file in files:
        with open(file, "rb") as f:
            # Read-ahead: on Lustre or NFS, page faults on the mapping would fetch the file in small pieces.
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_WILLNEED)
            try:
                start, header = read_header(f)
                # A private mapping: writable, so torch accepts it, and never written back to the file.
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
                tensors = [(name, DTYPES_BY_NAME[info["dtype"]], info["shape"], info["data_offsets"])
                           for name, info in header.items() if name != "__metadata__"]
            except (ValueError, KeyError, TypeError, struct.error) as e:
                raise UserError(f"{file} is not a readable safetensors file ({type(e).__name__}: {e}); "
                                "publish the weights again") from e
        for name, dtype, shape, (begin, end) in tensors:
            if end == begin:
                yield name, torch.empty(shape, dtype=dtype)
            else:
                yield name, torch.frombuffer(data, dtype=dtype, count=(end - begin) // dtype.itemsize,
                                             offset=start + begin).view(shape)
