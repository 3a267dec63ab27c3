"""Weight deltas: a published version as the bitwise difference from the version before it.

Between two RL steps at RL learning rates most values of a 16-bit model keep their exact bit
pattern (measured here: 2-4 % of bf16 values change per step of a 100M model at lr 1e-6), so the
XOR of the two versions' bit patterns is mostly zero bytes and zstd shrinks it to a few percent
of the model (`tools/bench_weights.py`). Reconstruction is exact: base XOR delta is the new bit
pattern, and a CRC-32 of every reconstructed tensor, recorded by the publisher, proves it.

File `weights/delta_<N>.rfd`, written once (temporary name, fsync, rename) and never changed:

    MAGIC | one zstd frame per tensor (its XOR, with zstd's own content checksum) | footer JSON |
    footer length (8 bytes, little-endian) | MAGIC

The footer names the version, its base version, every tensor (dtype, shape, frame offset and
length, CRC-32 of the base's and the new tensor's bytes) and both versions' checksums. Frames come
first so the publisher writes the file in one sequential pass as tensors arrive.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import zlib
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Self

from rfthpc.sharedfs.fileops import apply_mode

if TYPE_CHECKING:
    import torch

MAGIC = b"RFTDELTA"
FORMAT = 1
ZSTD_LEVEL = 3
"""zstd level of the frames: on mostly-zero XORs higher levels gain little and cost time."""
_TAIL = struct.Struct("<Q8s")


class DeltaCorrupt(ValueError):
    """A published file is unreadable, or what it rebuilds does not match its checksums."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)


@dataclass(frozen=True)
class DeltaTensor:
    """One tensor's entry in a delta file's footer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    length: int
    crc32: int
    """CRC-32 of the reconstructed tensor's bytes."""
    base_crc32: int
    """CRC-32 of the base tensor's bytes (a wrong base is detected before it is used)."""


@dataclass(frozen=True)
class DeltaFooter:
    """What a delta file holds: version `version` = version `base` XOR the frames."""

    version: int
    base: int
    checksum: str
    base_checksum: str
    tensors: tuple[DeltaTensor, ...]

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": self.version, "base": self.base, "checksum": self.checksum,
                "base_checksum": self.base_checksum,
                "tensors": [[t.name, t.dtype, list(t.shape), t.offset, t.length, t.crc32, t.base_crc32]
                            for t in self.tensors]}

    @classmethod
    def from_json(cls, data: dict) -> DeltaFooter:
        if data.get("format") != FORMAT:
            raise ValueError(f"delta format {data.get('format')!r}; this rfthpc reads format {FORMAT}")
        return cls(int(data["version"]), int(data["base"]), str(data["checksum"]), str(data["base_checksum"]),
                   tuple(DeltaTensor(str(n), str(d), tuple(int(x) for x in s), int(o), int(ln), int(c), int(b))
                         for n, d, s, o, ln, c, b in data["tensors"]))


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as a flat integer tensor of the same width (shares memory)."""
    import torch

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return tensor.contiguous().reshape(-1).view(ints[tensor.element_size()])


def tensor_crc(tensor: torch.Tensor) -> int:
    """CRC-32 of the tensor's bytes (zlib releases the GIL for large buffers)."""
    return zlib.crc32(memoryview(bits(tensor).numpy()))


def version_checksum(crcs: Mapping[str, int]) -> str:
    """One checksum of a whole version: a hash of every tensor's name and CRC-32."""
    h = hashlib.sha256()
    for name in sorted(crcs):
        h.update(f"{name}:{crcs[name]:08x}\n".encode())
    return h.hexdigest()[:16]


class _Codec(threading.local):
    """A zstd compressor and decompressor per thread (they are not thread-safe)."""

    def __init__(self) -> None:
        import zstandard

        self.cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
        self.dctx = zstandard.ZstdDecompressor()


_codec = _Codec()


def _encode(base: torch.Tensor, new: torch.Tensor) -> bytes:
    return _codec.cctx.compress(memoryview(bits(base).bitwise_xor(bits(new)).numpy()))


class DeltaWriter:
    """Writes `weights/delta_<version>.rfd` tensor by tensor; compression runs on a thread pool
    (zstd releases the GIL) while the caller prepares the next tensors.

    Use: `add` every tensor (base and new, same dtype and shape), then `commit` (footer, fsync,
    rename into place); `abort` removes the temporary file. The base and new tensors must stay
    unchanged until `commit` returns.
    """

    def __init__(self, tmp: Path, final: Path, version: int, base: int, base_checksum: str,
                 threads: int | None = None) -> None:
        self.tmp, self.final, self.version, self.base, self.base_checksum = tmp, final, version, base, base_checksum
        self._f: BinaryIO = open(tmp, "wb")  # noqa: SIM115 - closed by commit/abort
        self._f.write(MAGIC)
        self._offset = len(MAGIC)
        workers = threads or min(8, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rfthpc-delta")
        self._pending: deque[tuple[str, torch.Tensor, int, int, Future[bytes]]] = deque()
        self._entries: list[DeltaTensor] = []
        self._max_pending = 2 * workers

    def add(self, name: str, base: torch.Tensor, new: torch.Tensor, crc: int, base_crc: int) -> None:
        """Queue the delta of tensor `name` (CRC-32s of `new` and `base` given by the caller)."""
        if base.dtype != new.dtype or base.shape != new.shape:
            raise ValueError(f"{name}: base {base.dtype} {tuple(base.shape)} and new {new.dtype} "
                             f"{tuple(new.shape)} differ; a delta needs the same dtype and shape")
        self._pending.append((name, new, crc, base_crc, self._pool.submit(_encode, base, new)))
        while len(self._pending) > self._max_pending:
            self._write_next()

    def _write_next(self) -> None:
        name, new, crc, base_crc, future = self._pending.popleft()
        frame = future.result()
        self._f.write(frame)
        self._entries.append(DeltaTensor(name, str(new.dtype).removeprefix("torch."), tuple(new.shape),
                                         self._offset, len(frame), crc, base_crc))
        self._offset += len(frame)

    def commit(self) -> int:
        """Finish the file and rename it into place; return its size in bytes."""
        try:
            while self._pending:
                self._write_next()
            crcs = {e.name: e.crc32 for e in self._entries}
            footer = DeltaFooter(self.version, self.base, version_checksum(crcs), self.base_checksum,
                                 tuple(self._entries))
            raw = json.dumps(footer.to_json(), separators=(",", ":")).encode()
            self._f.write(raw)
            self._f.write(_TAIL.pack(len(raw), MAGIC))
            self._f.flush()
            os.fsync(self._f.fileno())
            size = self._f.tell()
            self._f.close()
            apply_mode(self.tmp, is_dir=False)
            os.rename(self.tmp, self.final)
            return size
        except BaseException:
            self.abort()
            raise
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """Drop the unfinished file."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._f.close()
        self.tmp.unlink(missing_ok=True)


def read_footer(path: Path) -> DeltaFooter:
    """The footer of delta file `path`; DeltaCorrupt if it is not a complete delta file."""
    with open(path, "rb") as f:
        return _footer(f, path)


def _footer(f: BinaryIO, path: Path) -> DeltaFooter:
    try:
        size = os.fstat(f.fileno()).st_size
        if size < len(MAGIC) + _TAIL.size:
            raise DeltaCorrupt(path, f"{size} bytes is too short for a delta file")
        f.seek(size - _TAIL.size)
        n, magic = _TAIL.unpack(f.read(_TAIL.size))
        if magic != MAGIC or n > size:
            raise DeltaCorrupt(path, "no delta footer (an unfinished or foreign file)")
        f.seek(size - _TAIL.size - n)
        return DeltaFooter.from_json(json.loads(f.read(n)))
    except (ValueError, KeyError, TypeError, struct.error) as e:
        if isinstance(e, DeltaCorrupt):
            raise
        raise DeltaCorrupt(path, f"unreadable delta footer ({type(e).__name__}: {e})") from None


class DeltaReader:
    """An open delta file: `apply` turns a base tensor into the new one, checked bit for bit.

    The file stays open until `close`, so clean-up removing it meanwhile does not cut the read.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by close()
        try:
            self.footer = _footer(self._f, self.path)
        except BaseException:
            self._f.close()
            raise
        self.entries = {t.name: t for t in self.footer.tensors}
        self.bytes_read = 0

    def apply(self, name: str, base: torch.Tensor, base_crc: int | None = None) -> tuple[torch.Tensor, int]:
        """Tensor `name` of the new version from its base; returns it and its CRC-32. DeltaCorrupt if
        the base or the result differs from what the publisher recorded (`base_crc`: the base's
        CRC-32 if the caller knows it, else it is computed)."""
        import numpy as np
        import torch
        import zstandard

        entry = self.entries.get(name)
        if entry is None:
            raise DeltaCorrupt(self.path, f"no tensor {name}")
        if str(base.dtype).removeprefix("torch.") != entry.dtype or tuple(base.shape) != entry.shape:
            raise DeltaCorrupt(self.path, f"{name} is {entry.dtype} {entry.shape}, the base "
                               f"{base.dtype} {tuple(base.shape)}")
        if (tensor_crc(base) if base_crc is None else base_crc) != entry.base_crc32:
            raise DeltaCorrupt(self.path, f"the base of {name} is not version {self.footer.base} "
                               "(its checksum differs)")
        frame = os.pread(self._f.fileno(), entry.length, entry.offset)
        self.bytes_read += len(frame)
        if len(frame) != entry.length:
            raise DeltaCorrupt(self.path, f"{name}'s frame is cut short")
        base_bits = bits(base).numpy()
        try:
            xor = np.frombuffer(_codec.dctx.decompress(frame), dtype=base_bits.dtype)
        except zstandard.ZstdError as e:
            raise DeltaCorrupt(self.path, f"{name}'s frame does not decompress ({e})") from None
        if xor.size != base_bits.size:
            raise DeltaCorrupt(self.path, f"{name}'s frame has {xor.size} values, expected {base_bits.size}")
        new = torch.from_numpy(np.bitwise_xor(base_bits, xor)).view(base.dtype).view(base.shape)
        crc = tensor_crc(new)
        if crc != entry.crc32:
            raise DeltaCorrupt(self.path, f"{name} reconstructs with a different checksum")
        return new, crc

    def close(self) -> None:
        """Close the file."""
        self._f.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
