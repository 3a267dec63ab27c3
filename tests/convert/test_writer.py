"""Streaming safetensors writer: the files it writes are what safetensors and transformers read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from rfthpc.errors import UserError
from rfthpc.weights.safetensors_write import (
    INDEX_FILE,
    SINGLE_FILE,
    TensorEntry,
    has_complete_weights,
    parse_size,
    plan_shards,
    write_shards,
)


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(7, 5, generator=g),
        "b.scalar": torch.tensor(3.5),
        "c.ids": torch.arange(11, dtype=torch.int64),
        "d.half": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "e.empty": torch.zeros(0, 4),
    }


def _write(out: Path, tensors: dict[str, torch.Tensor], max_shard: int, dtype: torch.dtype | None = None) -> list[str]:
    entries = [
        TensorEntry(k, tuple(v.shape), dtype if dtype and v.is_floating_point() else v.dtype)
        for k, v in tensors.items()
    ]
    return write_shards(out, entries, ((k, [v]) for k, v in tensors.items()), max_shard)


def _read_all(out: Path) -> dict[str, torch.Tensor]:
    got = {}
    for f in out.glob("*.safetensors"):
        with safe_open(f, framework="pt") as st:
            assert st.metadata() == {"format": "pt"}
            got.update({k: st.get_tensor(k) for k in st.keys()})  # noqa: SIM118 — safe_open is not a dict
    return got


def test_single_file_round_trips_every_dtype_and_shape(tmp_path: Path) -> None:
    tensors = _tensors()
    assert _write(tmp_path, tensors, 10**9) == [SINGLE_FILE]
    got = _read_all(tmp_path)
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v)


def test_shards_split_at_the_limit_and_the_index_maps_every_tensor(tmp_path: Path) -> None:
    tensors = _tensors()
    names = _write(tmp_path, tensors, 100, dtype=torch.float16)
    shards = [n for n in names if n.endswith(".safetensors")]
    assert len(shards) == 3 and names[-1] == INDEX_FILE
    assert shards[0] == "model-00001-of-00003.safetensors"
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    assert set(index["weight_map"]) == set(tensors)
    assert set(index["weight_map"].values()) == set(shards)
    got = _read_all(tmp_path)
    assert got["a.weight"].dtype == torch.float16 and torch.equal(got["a.weight"], tensors["a.weight"].half())
    assert got["c.ids"].dtype == torch.int64 and torch.equal(got["c.ids"], tensors["c.ids"])
    assert index["metadata"]["total_size"] == sum(v.numel() * got[k].element_size() for k, v in tensors.items())


def test_plan_gives_an_oversized_tensor_its_own_shard() -> None:
    entries = [
        TensorEntry("small", (2,), torch.float32),
        TensorEntry("big", (100,), torch.float32),
        TensorEntry("tail", (2,), torch.float32),
    ]
    assert [[e.name for e in s] for s in plan_shards(entries, 64)] == [["small"], ["big"], ["tail"]]


def test_completeness_needs_config_and_every_whole_shard(tmp_path: Path) -> None:
    _write(tmp_path, _tensors(), 100)
    assert not has_complete_weights(tmp_path)  # no config.json yet
    (tmp_path / "config.json").write_text("{}")
    assert has_complete_weights(tmp_path)
    shard = tmp_path / "model-00002-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1])
    assert not has_complete_weights(tmp_path)
    shard.unlink()
    assert not has_complete_weights(tmp_path)


@pytest.mark.parametrize(
    "text,expected",
    [("5GB", 5 * 10**9), ("500MB", 500 * 10**6), ("2GiB", 2 * 2**30), ("1048576", 1048576), ("1.5kb", 1500)],
)
def test_sizes_parse(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "five", "-1GB", "0", "3 parsecs"])
def test_bad_sizes_are_user_errors(text: str) -> None:
    with pytest.raises(UserError, match="size"):
        parse_size(text)


def test_row_blocks_are_written_as_one_tensor(tmp_path: Path) -> None:
    full = torch.randn(10, 3)
    entries = [TensorEntry("w", (10, 3), torch.bfloat16)]
    write_shards(tmp_path, entries, [("w", iter([full[:4], full[4:9], full[9:]]))], 10**9)
    assert torch.equal(_read_all(tmp_path)["w"], full.to(torch.bfloat16))


def test_blocks_that_do_not_make_up_the_tensor_are_refused(tmp_path: Path) -> None:
    entries = [TensorEntry("w", (10, 3), torch.float32)]
    with pytest.raises(RuntimeError, match="rows"):
        write_shards(tmp_path, entries, [("w", [torch.zeros(4, 3)])], 10**9)
