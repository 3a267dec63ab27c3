"""Stream tensors into sharded safetensors files (+ index), one tensor in memory at a time.

The safetensors format is an 8-byte little-endian header length, a JSON header naming every
tensor's dtype, shape and byte range, then the raw bytes. Since every tensor's shape and dtype are
known before any data is read, the headers are written first and each tensor's bytes are appended
as it arrives; nothing holds the whole model.
"""

from __future__ import annotations

import functools
import json
import os
import re
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from rfthpc.errors import UserError
from rfthpc.sharedfs.fileops import start_writeback

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
WRITEBACK_BYTES = 16 * 1024**2
"""Bytes written between requests that the kernel start writing them to disk (the fsync at the end
of a shard then waits for little more than the last of them)."""
PENDING_BYTES = 64 * 1024**2
"""Bytes of tensors that may wait for the writer thread before the caller waits for it."""

_ST_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
DTYPES_BY_NAME = {name: dtype for dtype, name in _ST_DTYPES.items()}
"""torch dtypes by safetensors dtype name."""

_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(text: str | int) -> int:
    """Bytes in a size such as `5GB`, `500MB`, `2GiB` or `1048576` (decimal units as in HF)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B?)\s*", str(text).upper())
    if not m or m.group(2) not in _SIZE_UNITS or float(m.group(1)) <= 0:
        raise UserError(f"size {text!r}: write a positive number with an optional unit, e.g. 5GB, 500MB or 2GiB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


@dataclass(frozen=True)
class TensorEntry:
    """One tensor to write: its name, shape and the dtype it is written in."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor in the output dtype."""
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


def plan_shards(entries: list[TensorEntry], max_shard_size: int) -> list[list[TensorEntry]]:
    """Split `entries` (in order) into shards of at most `max_shard_size` bytes.

    A tensor larger than the limit gets a shard of its own, as Hugging Face does.
    """
    shards: list[list[TensorEntry]] = [[]]
    size = 0
    for e in entries:
        if shards[-1] and size + e.nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += e.nbytes
    return shards if shards[0] else []


def shard_file_names(n: int, stem: str = "model") -> list[str]:
    """`model.safetensors` for one shard, else `model-0000i-of-0000n.safetensors` (HF's names; `stem`
    replaces `model`, e.g. `adapter_model` for a PEFT adapter)."""
    if n == 1:
        return [f"{stem}.safetensors"]
    return [f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def safetensors_header(entries: list[TensorEntry]) -> bytes:
    """The header of a safetensors file holding `entries` in order (its length prefix included)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for e in entries:
        header[e.name] = {
            "dtype": _ST_DTYPES[e.dtype],
            "shape": list(e.shape),
            "data_offsets": [offset, offset + e.nbytes],
        }
        offset += e.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    # The safetensors reference implementation pads the header with spaces to 8-byte alignment.
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes as stored in a safetensors file (row-major, its own dtype)."""
    # A uint8 view shares memory with the tensor, so writing it copies nothing (bf16 included).
    return memoryview(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())


Pieces = Iterable[torch.Tensor]
"""A tensor as row blocks: concatenated along dim 0 (in order) they are the tensor."""


class _OverlappedWriter:
    """Appends buffers to an open file, in order, from a helper thread, so that the caller gathers
    and casts the next tensors while earlier ones are written (the write releases the GIL).

    The caller waits only when the buffers queued and not yet written would exceed `max_pending`
    bytes (default `PENDING_BYTES`; one larger buffer is still taken alone), which bounds the memory that written-out
    tensors hold, without a hand-over between the threads for each tensor (a thread wake-up
    costs as much as writing a small tensor). A failed write is raised from the next call.
    """

    def __init__(self, f: BinaryIO, max_pending: int | None = None) -> None:
        self._f = f
        self._max_pending = PENDING_BYTES if max_pending is None else max_pending
        self._queue: deque[tuple[memoryview, Callable[[], None] | None]] = deque()
        self._pending = 0
        self._closed = False
        self._error: BaseException | None = None
        self._reported = False
        self._cond = threading.Condition()
        self._written = 0
        self._synced = 0
        self._thread = threading.Thread(target=self._run, name="rfthpc-writer", daemon=True)
        self._thread.start()

    def write(self, data: memoryview, done: Callable[[], None] | None = None) -> None:
        """Queue `data` (which must stay unchanged until written) after the buffers before it;
        the writer thread calls `done` once it is written."""
        with self._cond:
            while self._error is None and self._pending and self._pending + data.nbytes > self._max_pending:
                self._cond.wait()
            self._raise_error()
            self._queue.append((data, done))
            self._pending += data.nbytes
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                data, done = self._queue[0]
            try:
                self._write(data)
                if done is not None:
                    done()
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                with self._cond:
                    self._error = e
                    self._queue.clear()
                    self._pending = 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._queue.popleft()
                self._pending -= data.nbytes
                self._cond.notify_all()

    def _write(self, data: memoryview) -> None:
        self._f.write(data)
        self._written += data.nbytes
        if self._written - self._synced >= WRITEBACK_BYTES:
            self._f.flush()
            start_writeback(self._f.fileno(), self._synced, self._written - self._synced)
            self._synced = self._written

    def _raise_error(self) -> None:
        if self._error is not None:
            self._reported = True
            raise self._error

    def close(self) -> None:
        """Write everything queued, stop the thread and raise a failed write's error (unless a
        `write` already raised it)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        if not self._reported:
            self._raise_error()


def _write_pieces(writer: _OverlappedWriter, e: TensorEntry, name: str, pieces: Pieces,
                  written: Callable[[torch.Tensor], None] | None) -> None:
    """Append the bytes of `pieces` (cast to `e.dtype`), checking that they make up tensor `e`;
    `written(piece)` follows each piece's write."""
    rows = 0
    for piece in pieces:
        if name != e.name or tuple(piece.shape[1:]) != e.shape[1:] or (not e.shape and piece.dim() != 0):
            raise RuntimeError(
                f"tensor stream out of order: got {name} {tuple(piece.shape)}, expected {e.name} {e.shape}"
            )
        writer.write(tensor_bytes(piece.to(e.dtype)), None if written is None else functools.partial(written, piece))
        rows += piece.shape[0] if e.shape else 1
    if rows != (e.shape[0] if e.shape else 1):
        raise RuntimeError(f"tensor stream gave {rows} rows of {name}, expected {e.shape}")


def write_shards(
    out_dir: Path,
    entries: list[TensorEntry],
    tensors: Iterable[tuple[str, Pieces]],
    max_shard_size: int,
    on_bytes: Callable[[int], None] | None = None,
    written: Callable[[torch.Tensor], None] | None = None,
    stem: str = "model",
) -> list[str]:
    """Write `tensors` (yielded in the order of `entries`) as safetensors shards into `out_dir`.

    Each tensor comes as row blocks (a row-major tensor's bytes are its row blocks' bytes in
    order, so sharded pieces need no concatenation), is cast to its entry's dtype, appended to
    its shard and dropped once written; a helper thread writes while the next tensors are
    prepared (at most `PENDING_BYTES` of them wait). Every file is fsynced. With more than one
    shard, `model.safetensors.index.json` maps each name to its file. `written(piece)` is called
    (from the writer thread) once a row block's bytes are written, e.g. to hand back the pages of
    a memory-mapped source. `stem` names the files (`shard_file_names`). Returns the file names written.
    """
    shards = plan_shards(entries, max_shard_size)
    names = shard_file_names(len(shards), stem)
    stream = iter(tensors)
    for shard, fname in zip(shards, names):
        with open(out_dir / fname, "wb") as f:
            f.write(safetensors_header(shard))
            writer = _OverlappedWriter(f)
            try:
                for e in shard:
                    name, pieces = next(stream)
                    _write_pieces(writer, e, name, pieces, written)
                    if on_bytes is not None:
                        on_bytes(e.nbytes)
                    del pieces
            finally:
                writer.close()
            f.flush()
            os.fsync(f.fileno())
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(e.nbytes for e in entries)},
            "weight_map": {e.name: fname for shard, fname in zip(shards, names) for e in shard},
        }
        with open(out_dir / INDEX_FILE, "w") as f:
            json.dump(index, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        names.append(INDEX_FILE)
    return names


def read_header(f: BinaryIO) -> tuple[int, dict[str, Any]]:
    """The JSON header of the safetensors file open in `f` (read from its start), and the offset of
    its data section (the origin of every tensor's `data_offsets`)."""
    (n,) = struct.unpack("<Q", f.read(8))
    return 8 + n, json.loads(f.read(n))


def _valid_safetensors(path: Path) -> bool:
    """True if `path` has a readable safetensors header and is as long as that header says."""
    try:
        with open(path, "rb") as f:
            start, header = read_header(f)
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        return path.stat().st_size == start + end
    except (OSError, ValueError, struct.error, KeyError, TypeError):
        return False


def has_complete_weights(hf_dir: Path) -> bool:
    """True if `hf_dir` holds config.json and whole safetensors weights (single file or index + all shards)."""
    hf_dir = Path(hf_dir)
    if not (hf_dir / "config.json").is_file():
        return False
    if (hf_dir / INDEX_FILE).is_file():
        try:
            weight_map = json.loads((hf_dir / INDEX_FILE).read_text())["weight_map"]
        except (OSError, ValueError, KeyError):
            return False
        return bool(weight_map) and all(_valid_safetensors(hf_dir / f) for f in set(weight_map.values()))
    return _valid_safetensors(hf_dir / SINGLE_FILE)


def has_complete_adapter(adapter_dir: Path) -> bool:
    """True if `adapter_dir` holds a PEFT adapter: adapter_config.json and a whole adapter_model.safetensors."""
    return (Path(adapter_dir) / "adapter_config.json").is_file() and \
        _valid_safetensors(Path(adapter_dir) / "adapter_model.safetensors")
