"""The history rows an offline wandb run wrote (`run-<id>.wandb`), read back for tests.

The file is wandb's record log, as `wandb sync` reads it: a 7-byte header (`:W&B`, magic, version),
then LevelDB-log blocks of 32 KiB holding chunks (crc32c 4 bytes, length 2, type 1: full, first,
middle or last) of serialized `wandb_internal_pb2.Record`s.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HEADER = 7
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _records(data: bytes) -> Iterator[bytes]:
    pos, parts = HEADER, b""
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:
            pos += left  # the block's zero-filled tail
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if kind == 0:
            pos += left
            continue
        parts += data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind in (FULL, LAST):
            yield parts
            parts = b""


def history(run_dir: Path) -> list[dict[str, Any]]:
    """Every history row of the one offline run under `run_dir` (wandb's `dir`), in order."""
    from wandb.proto import wandb_internal_pb2

    (path,) = Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")
    rows = []
    for raw in _records(path.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows
