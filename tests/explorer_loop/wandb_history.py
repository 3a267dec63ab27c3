"""The history rows an offline wandb run wrote (`run-<id>.wandb`), read back for tests.

The file is wandb's record log, as `wandb sync` reads it: a 7-byte header (`:W&B`, magic, version),
then LevelDB-log blocks of 32 KiB holding chunks (crc32c 4 bytes, length 2, type 1: full, first,
middle or last) of serialized `wandb_internal_pb2.Record`s.
"""

from __future__ import annotations

import json
import struct
import time
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
        if pos + CHUNK_HEADER + length > len(data):
            return  # a chunk wandb is still writing
        parts += data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind in (FULL, LAST):
            yield parts
            parts = b""


def history(run_dir: Path, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Every history row of the one offline run under `run_dir` (wandb's `dir`), in order.

    `wandb.finish()` can return before wandb's service has written the run's records (seen: a file
    still holding only its header, complete two seconds later; a record read half-written), so this
    reads again, up to `timeout_s`, until the file parses and holds the run's closing `exit` record.
    """
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + timeout_s
    while True:
        (path,) = Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")
        records = []
        try:
            for raw in _records(path.read_bytes()):
                record = wandb_internal_pb2.Record()
                record.ParseFromString(raw)
                records.append(record)
        except DecodeError:
            records = []  # read while wandb was writing it
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        assert time.monotonic() < deadline, f"{path} got no exit record within {timeout_s:.0f} s"
        time.sleep(0.2)
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]
