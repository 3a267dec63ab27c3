"""The shard writer: early writeback and its writer thread change no byte; write errors reach the caller."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from rfthpc.weights import safetensors_write as writer
from rfthpc.weights.safetensors_write import TensorEntry, write_shards


def _write(out: Path, tensors: dict[str, torch.Tensor]) -> None:
    out.mkdir()
    entries = [TensorEntry(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]
    write_shards(out, entries, ((k, [v]) for k, v in tensors.items()), max_shard_size=1000)


def test_shards_are_the_same_with_writeback_after_every_tensor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    tensors = {f"layer{i}.weight": torch.randn(9, 13, generator=g) for i in range(6)}
    monkeypatch.setattr(writer, "WRITEBACK_BYTES", 10**12)
    _write(tmp_path / "never", tensors)
    monkeypatch.setattr(writer, "WRITEBACK_BYTES", 1)
    _write(tmp_path / "always", tensors)
    never = sorted(p.name for p in (tmp_path / "never").iterdir())
    assert never == sorted(p.name for p in (tmp_path / "always").iterdir()) and len(never) > 2  # shards + index
    for name in never:
        assert (tmp_path / "never" / name).read_bytes() == (tmp_path / "always" / name).read_bytes(), name


def test_shards_are_the_same_whatever_the_writer_queue_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer thread takes tensors in order whether the caller may queue one byte or all of them."""
    g = torch.Generator().manual_seed(1)
    tensors = {f"t{i}": torch.randn(3 + i, 5, generator=g) for i in range(20)}
    monkeypatch.setattr(writer, "PENDING_BYTES", 1)
    probe = writer._OverlappedWriter(io.BytesIO())
    probe.close()
    assert probe._max_pending == 1  # the bound is read when a writer is made
    _write(tmp_path / "one", tensors)
    monkeypatch.setattr(writer, "PENDING_BYTES", 10**12)
    _write(tmp_path / "all", tensors)
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "all").iterdir())
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "all" / name).read_bytes(), name


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_failed_write_reaches_the_caller() -> None:
    """A write error in the writer thread (here ENOSPC from /dev/full) is raised to the caller."""
    data = torch.zeros(1 << 20, dtype=torch.uint8)
    with open("/dev/full", "wb", buffering=0) as f:
        w = writer._OverlappedWriter(f, max_pending=1)
        with pytest.raises(OSError, match="No space left"):
            for _ in range(8):
                w.write(memoryview(data.numpy()))
            w.close()


def test_written_follows_each_block_write(tmp_path: Path) -> None:
    """`written(block)` comes once the block's bytes are in the file (the veRL reader then hands a
    memory-mapped block's pages back), for every block, in order."""
    blocks = [torch.full((64, 256), float(i)) for i in range(6)]  # 64 KiB each: past any write buffer
    out = tmp_path / "out"
    out.mkdir()
    seen: list[tuple[int, int]] = []
    header = out / "model.safetensors"
    write_shards(out, [TensorEntry("w", (64 * 6, 256), torch.float32)], [("w", blocks)], max_shard_size=10**9,
                 written=lambda b: seen.append((int(b[0, 0].item()), header.stat().st_size)))
    assert [i for i, _ in seen] == list(range(6))
    data_start = header.stat().st_size - 6 * blocks[0].nbytes
    for i, size in seen:
        assert size >= data_start + (i + 1) * blocks[0].nbytes, (i, size)
