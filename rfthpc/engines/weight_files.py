"""Reading a published step directory (`weights/step_N/*.safetensors`) tensor by tensor."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rfthpc.errors import UserError


def iter_safetensors_dir(path: Path) -> Iterator[tuple[str, Any]]:
    """Every tensor of `path/*.safetensors` (one file or the shards of a sharded checkpoint), file by
    file in name order, as torch tensors."""
    from safetensors import safe_open

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise UserError(f"weights directory {path} holds no *.safetensors files; publish a complete HF directory")
    for file in files:
        # Read-ahead: on Lustre or NFS, page faults on the mapped file would fetch it in small pieces.
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is no mapping)
                yield name, f.get_tensor(name)
