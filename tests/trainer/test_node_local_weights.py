"""Versions handed to explorers on the trainer's node through node-local memory (rfthpc.weights.node_local):
the copy is the published version bit for bit, is in place before `latest` names it, is linked into the
explorer's staging without reading the run directory, and its absence or a failed write costs nothing
but the shortcut."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rfthpc.rundir.paths import RunDir
from rfthpc.weights import node_local
from rfthpc.weights import published as weights
from rfthpc.weights import publisher as publisher_module
from rfthpc.weights.follow import STAGED_FILE, WeightFollower
from rfthpc.weights.publisher import Publisher
from tests.trainer.test_weight_deltas import _crc, _engine, _engine_state, _equal, _train


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir(tmp_path / "run").create()


class Trainer:
    """A publisher with node-local copies, publishing a drifting copy of the tiny model."""

    def __init__(self, run: RunDir, model: Path, staging: Path) -> None:
        self.local = node_local.node_local_dir(staging, run.root)
        self.publisher = Publisher(run.root, model, torch.bfloat16, "on", full_every=3, node_local_root=self.local)
        self.state = {k: v.clone() for k, v in load_file(str(model / "model.safetensors")).items()}
        self.truth: dict[int, dict[str, torch.Tensor]] = {}

    def publish(self, version: int) -> None:
        _train(self.state, version)
        self.publisher.publish(version, weights.TensorStream.of(self.state, torch.bfloat16))
        self.truth[version] = {k: t.to(torch.bfloat16) for k, t in self.state.items()}


def test_each_version_is_copied_bit_for_bit_and_only_the_newest_two_are_kept(
        run: RunDir, tiny_model: Path, tmp_path: Path) -> None:
    trainer = Trainer(run, tiny_model, tmp_path / "shm")
    for v in range(1, 6):   # snapshots 1 and 4, deltas between: both kinds of publication copy
        trainer.publish(v)
    assert node_local.copies(trainer.local) == [5, 4]
    for v in (4, 5):
        path, crcs = node_local.read_copy(trainer.local, v)
        assert _equal(load_file(str(path)), trainer.truth[v])
        assert crcs == {k: _crc(t) for k, t in trainer.truth[v].items()}
    assert node_local.read_copy(trainer.local, 3) is None
    trainer.publisher.close()
    assert node_local.copies(trainer.local) == [5]   # the explorers' final evaluation may still load it


def test_the_copy_is_in_place_before_latest_names_the_version(
        run: RunDir, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = Trainer(run, tiny_model, tmp_path / "shm")
    seen: list[tuple[int, bool]] = []
    point = weights.point_latest

    def point_latest(run_dir: Path, version: int) -> None:
        seen.append((version, node_local.read_copy(trainer.local, version) is not None))
        point(run_dir, version)

    monkeypatch.setattr(publisher_module.published, "point_latest", point_latest)
    trainer.publish(1)
    trainer.publish(2)
    assert seen == [(1, True), (2, True)]


def test_an_explorer_on_the_node_links_the_copy_and_reads_nothing_from_the_run_directory(
        run: RunDir, tiny_model: Path, tmp_path: Path) -> None:
    staging = tmp_path / "shm"
    trainer = Trainer(run, tiny_model, staging)
    for v in range(1, 5):
        trainer.publish(v)
    follower = WeightFollower(run, "ex", 0, staging_root=staging)
    version, path = follower.start_point(str(tiny_model))
    assert version == 4
    engine = _engine(Path(path))
    follower.attach(engine, version, background=False)
    try:
        trainer.publish(5)
        assert follower.prefetch(5) and follower.update()
        assert _equal(_engine_state(engine), trainer.truth[5])
        stats = follower.stats
        assert stats.from_node_local and stats.bytes_read == 0 and stats.node_local_loads == 1
        copy, _ = node_local.read_copy(trainer.local, 5)
        assert os.stat(follower.staging / "v5" / STAGED_FILE).st_ino == os.stat(copy).st_ino   # a link, not a copy
        # A copy gone (dropped, or a trainer on another node): the run directory's delta, on the linked bits.
        trainer.publish(6)
        node_local.clear(trainer.local)
        assert follower.prefetch(6) and follower.update()
        assert _equal(_engine_state(engine), trainer.truth[6])
        assert not follower.stats.from_node_local and not follower.stats.from_full and follower.stats.bytes_read > 0
        trainer.publish(7)
        assert follower.prefetch(7) and follower.update() and follower.stats.node_local_loads == 2
        assert _equal(_engine_state(engine), trainer.truth[7])
    finally:
        trainer.publisher.close()
        follower.close()
    assert not trainer.local.exists()   # the explorer held the last copy's version: nothing newer will come


def test_a_failed_node_local_write_costs_the_copy_not_the_publication(
        run: RunDir, tiny_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    publisher = Publisher(run.root, tiny_model, torch.bfloat16, "on", node_local_root=blocker / "published")
    state = load_file(str(tiny_model / "model.safetensors"))
    publisher.publish(1, weights.TensorStream.of(state, torch.bfloat16))
    assert weights.read_latest(run.root) == 1 and weights.is_published(run.root, 1)
    assert "no node-local copy of policy version 1" in caplog.text


def test_adapters_are_not_copied(run: RunDir, tiny_model: Path, tmp_path: Path) -> None:
    publisher = Publisher(run.root, tiny_model, torch.bfloat16, adapter_config={"r": 4},
                          node_local_root=tmp_path / "shm" / "published")
    assert publisher.node_local_root is None
