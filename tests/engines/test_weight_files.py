"""Reading step directories for the engines: every dtype and shape the writer produces, zero-size
tensors, sharded directories, and a clear error for a directory or file that holds no weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from rfthpc.errors import UserError
from rfthpc.weights import published as weights
from rfthpc.weights.safetensors_read import iter_safetensors_dir
from tests.engines.helpers import publish_changed


def test_reads_every_tensor_of_every_shard(tmp_path: Path) -> None:
    first = {
        "a.bf16": torch.randn(3, 5).to(torch.bfloat16),
        "b.f16": torch.randn(7).to(torch.float16),  # odd byte count: the next tensor starts unaligned to 4
        "c.f32": torch.randn(2, 3, 4),
        "d.i64": torch.arange(5),
        "e.empty": torch.zeros(0, 4),
        "f.scalar": torch.tensor(2.5),
    }
    second = {"g.u8": torch.arange(9, dtype=torch.uint8).reshape(3, 3)}
    save_file(first, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file(second, str(tmp_path / "model-00002-of-00002.safetensors"))
    got = dict(iter_safetensors_dir(tmp_path))
    assert sorted(got) == sorted({**first, **second})
    for name, tensor in {**first, **second}.items():
        assert got[name].dtype == tensor.dtype and got[name].shape == tensor.shape, name
        assert torch.equal(got[name], tensor), name


def test_tensors_outlive_their_file(tmp_path: Path) -> None:
    save_file({"w": torch.arange(6.0)}, str(tmp_path / "model.safetensors"))
    got = dict(iter_safetensors_dir(tmp_path))
    (tmp_path / "model.safetensors").unlink()
    assert got["w"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_directory_without_weights_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"holds no \*\.safetensors files"):
        list(iter_safetensors_dir(tmp_path))


@pytest.mark.parametrize("content", [b"", b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}"])
def test_unreadable_file_is_named(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "model.safetensors").write_bytes(content)
    with pytest.raises(UserError, match=r"model\.safetensors is not a readable safetensors file"):
        list(iter_safetensors_dir(tmp_path))


def test_every_publication_rings_the_weights_doorbell(tmp_path: Path, tiny_model: Path) -> None:
    """Explorers waiting for weights look for the next entry of `weights/latest` only; each newer step must add one."""
    bell = weights.latest_doorbell(tmp_path)
    seen = [bell.signature()]
    for step in (1, 2):
        publish_changed(tmp_path, step, tiny_model, seed=step)
        seen.append(bell.signature())
    assert seen[0] == 0 and len(set(seen)) == 3
    publish_changed(tmp_path, 1, tiny_model, seed=9)  # an older step does not move `latest`
    assert bell.signature() == seen[-1]
