"""Early writeback (the kernel starts writing a shard while more is appended) changes no byte."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rfthpc.convert import writer
from rfthpc.convert.writer import TensorEntry, write_shards


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
