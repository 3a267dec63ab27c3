"""Chunk files: exact round trip of every field, plain arrays only, damage detected."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from rfthpc.store.chunks import ChunkBuilder, ChunkCorrupt, PendingGroup, read_chunk
from rfthpc.store.schema import Group, check_group
from rfthpc.store.schema import StoredExperience as Experience

from .groups import assert_same_experiences


def _pending(groups: list[Group]) -> list[PendingGroup]:
    return [PendingGroup(g, *check_group(g)) for g in groups]


def write_chunk(path: Path, groups: list[PendingGroup], meta: dict) -> None:
    """A chunk file of `groups`, built the way ChunkWriter builds one."""
    builder = ChunkBuilder()
    for pending in groups:
        builder.add(pending, pending.group.group_id)
    builder.write(path, meta)


def _groups() -> list[Group]:
    prompt = np.array([5, 6, 7])
    shared = [
        Experience(prompt, np.array([1, 2, 3, 4]), np.array([-0.1, -0.2, -0.3, -0.4]), np.array([1, 1, 0, 1]),
                   reward=1.5, token_rewards=np.array([0.0, 0.0, 0.5, 1.0]), info={"correct": True}),
        Experience(prompt.copy(), np.array([9]), np.array([-2.0]), np.array([True]), reward=-1.0),
    ]
    multi_turn = [
        Experience(np.array([1]), np.array([3, 3]), np.zeros(2), np.zeros(2), 0.0, info={"turns": [1, 2]}),
        Experience(np.array([1, 2]), np.array([], np.int64), np.zeros(0), np.zeros(0), 0.25),
    ]
    return [
        Group("t1", shared, policy_version=3, explorer="ex", rank=2, group_id="g1", created_at=1.0,
              finished_at=2.5, info={"epoch": 0}),
        Group("t2", multi_turn, policy_version=4, explorer="ex", rank=2, group_id="g2", is_eval=True),
    ]


def test_round_trip_keeps_every_field_and_dtype(tmp_path: Path) -> None:
    path = tmp_path / "c.h5"
    written = _groups()
    write_chunk(path, _pending(written), {"explorer": "ex", "rank": 2, "stream": "ex/00002-x", "seq": 0})
    attrs, groups = read_chunk(path)
    assert attrs["n_groups"] == 2 and attrs["n_experiences"] == 4 and attrs["seq"] == 0
    for w, r in zip(written, groups):
        for field in ("task_id", "policy_version", "explorer", "rank", "group_id", "is_eval", "created_at",
                      "finished_at", "info"):
            assert getattr(r, field) == getattr(w, field), field
        assert_same_experiences(r, w)
        for re in r.experiences:
            assert (re.prompt_ids.dtype, re.response_ids.dtype, re.logprobs.dtype, re.loss_mask.dtype) == (
                np.int32, np.int32, np.float32, np.int8)


def test_shared_prompt_is_stored_once_and_file_holds_plain_arrays_only(tmp_path: Path) -> None:
    path = tmp_path / "c.h5"
    write_chunk(path, _pending(_groups()), {"explorer": "ex", "rank": 2, "stream": "s", "seq": 0})
    kinds = []
    with h5py.File(path, "r", locking=False) as f:
        # group t1's two identical prompts (3 tokens) once, t2's two different prompts (1 + 2 tokens)
        assert f["prompt_tokens"].shape == (6,)
        f.visititems(lambda name, obj: kinds.append((name, obj.dtype)) if isinstance(obj, h5py.Dataset) else None)
    for name, dtype in kinds:
        # Numbers (or tables of numbers) or UTF-8 strings: no opaque blobs, object references or pickles.
        fields = [dtype.fields[k][0] for k in dtype.names] if dtype.names else [dtype]
        assert all(d.kind in "iuf" for d in fields) or h5py.check_string_dtype(dtype) is not None, (name, dtype)


def test_truncated_chunk_is_reported_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "c.h5"
    write_chunk(path, _pending(_groups()), {"explorer": "ex", "rank": 2, "stream": "s", "seq": 0})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ChunkCorrupt, match="unreadable"):
        read_chunk(path)


def test_garbage_and_foreign_hdf5_are_reported_corrupt(tmp_path: Path) -> None:
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    with pytest.raises(ChunkCorrupt):
        read_chunk(junk)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(ChunkCorrupt, match="format"):
        read_chunk(foreign)


def test_inconsistent_index_is_reported_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "c.h5"
    write_chunk(path, _pending(_groups()), {"explorer": "ex", "rank": 2, "stream": "s", "seq": 0})
    with h5py.File(path, "r+", locking=False) as f:
        rows = f["experiences"][()]
        rows["response_len"][0] = 10_000
        f["experiences"][...] = rows
    with pytest.raises(ChunkCorrupt, match="response spans"):
        read_chunk(path)


def test_missing_file_is_not_corrupt(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_chunk(tmp_path / "gone.h5")
