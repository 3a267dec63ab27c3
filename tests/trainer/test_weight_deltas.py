"""Delta publishing: versions rebuilt bit for bit from full snapshots and XOR deltas, corrupt files
found and skipped, explorers that start late or are requeued, and clean-up under live readers."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rfthpc.engines.base import EngineSettings
from rfthpc.engines.hf_engine import TransformersEngine
from rfthpc.rundir.paths import RunDir
from rfthpc.weights import chain as weight_chain
from rfthpc.weights import published as weights
from rfthpc.weights.delta import DeltaCorrupt, read_footer
from rfthpc.weights.follow import WeightFollower
from rfthpc.weights.publisher import Publisher, deltas_pay
from tests.trainer.conftest import ROOT, kill_while_writing, trainer_env


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir(tmp_path / "run").create()


def _train(state: dict[str, torch.Tensor], seed: int) -> None:
    """An RL-sized update: a few percent of the values move by about their bf16 resolution."""
    g = torch.Generator().manual_seed(seed)
    for t in state.values():
        mask = torch.rand(t.shape, generator=g) < 0.05
        t += mask * torch.randn(t.shape, generator=g) * t.abs().clamp(min=1e-3) * 0.01


def _publish_versions(run: RunDir, model: Path, versions: range, full_every: int,
                      dtype: torch.dtype = torch.bfloat16) -> dict[int, dict[str, torch.Tensor]]:
    """Publish `versions` of a drifting copy of `model`; return each version's exact published tensors."""
    state = {k: v.clone() for k, v in load_file(str(model / "model.safetensors")).items()}
    publisher = Publisher(run.root, model, dtype, "on", full_every=full_every)
    truth = {}
    for v in versions:
        _train(state, v)
        publisher.publish(v, weights.TensorStream.of(state, dtype))
        truth[v] = {k: t.to(dtype) for k, t in state.items()}
    return truth


def _rebuilt(run: RunDir, chain: weight_chain.Chain, held=None) -> dict[str, torch.Tensor]:
    with weight_chain.ChainReader(run.root, chain, held) as reader:
        return {name: tensor.clone() for name, tensor, _ in reader}


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].view(torch.int16), b[k].view(torch.int16)) for k in a)


def test_every_version_rebuilds_bit_for_bit_from_snapshots_and_deltas(run: RunDir, tiny_model: Path) -> None:
    truth = _publish_versions(run, tiny_model, range(1, 9), full_every=3)
    full, deltas = weights.published_versions(run.root)
    assert full == {1, 4, 7} and deltas == set(range(2, 9))   # a snapshot every 3rd version, deltas after the first
    full_size = (weights.step_dir(run.root, 1) / "model.safetensors").stat().st_size
    assert all(weights.delta_file(run.root, v).stat().st_size < full_size / 2 for v in deltas)
    for v in range(1, 9):
        chain = weight_chain.plan_chain(run.root, v)
        assert chain is not None and chain.from_full and chain.start == max(f for f in full if f <= v)
        assert _equal(_rebuilt(run, chain), truth[v])
    # A reader holding version 2 continues with deltas only, across the snapshot of version 4.
    chain = weight_chain.plan_chain(run.root, 8, held=2)
    assert chain == weight_chain.Chain(8, 2, False, (3, 4, 5, 6, 7, 8))
    assert _equal(_rebuilt(run, chain, truth[2]), truth[8])
    assert read_footer(weights.delta_file(run.root, 5)).base == 4


def test_deltas_are_on_for_16_bit_weights_by_default() -> None:
    assert deltas_pay("auto", torch.bfloat16) and deltas_pay("auto", torch.float16)
    assert not deltas_pay("auto", torch.float32) and deltas_pay("on", torch.float32)
    assert not deltas_pay("off", torch.bfloat16)


def test_float32_deltas_are_exact_too(run: RunDir, tiny_model: Path) -> None:
    truth = _publish_versions(run, tiny_model, range(1, 4), full_every=10, dtype=torch.float32)
    chain = weight_chain.plan_chain(run.root, 3)
    assert chain == weight_chain.Chain(3, 1, True, (2, 3))
    rebuilt = _rebuilt(run, chain)
    assert all(torch.equal(rebuilt[k], truth[3][k]) for k in truth[3])


def test_a_version_published_already_is_kept_and_the_next_is_a_full_snapshot(run: RunDir, tiny_model: Path) -> None:
    """A resumed trainer meets versions it published before it stopped: it leaves them, and since it
    holds no bits of them, its next version is a full snapshot."""
    _publish_versions(run, tiny_model, range(1, 4), full_every=10)
    state = load_file(str(tiny_model / "model.safetensors"))
    resumed = Publisher(run.root, tiny_model, torch.bfloat16, "on", full_every=10)
    before = weights.delta_file(run.root, 3).read_bytes()
    assert resumed.publish(3, weights.TensorStream.of(state, torch.bfloat16)) is None
    assert weights.delta_file(run.root, 3).read_bytes() == before
    p = resumed.publish(4, weights.TensorStream.of(state, torch.bfloat16))
    assert p is not None and p.full_bytes > 0 and p.delta_bytes == 0
    assert weights.read_latest(run.root) == 4


def test_materialize_writes_any_version_as_a_hugging_face_directory(run: RunDir, tiny_model: Path,
                                                                    tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    truth = _publish_versions(run, tiny_model, range(1, 6), full_every=4)
    out = tmp_path / "v3"
    result = subprocess.run([sys.executable, "-m", "rfthpc", "weights", "materialize", str(run.root), "--version",
                             "3", "--out", str(out)], env=trainer_env(), cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "full snapshot 1 + deltas [2, 3]" in result.stdout
    assert _equal(load_file(str(out / "model.safetensors")), truth[3])
    assert not (out / weights.CHECKSUMS).exists() and (out / "tokenizer.json").is_file()
    assert AutoModelForCausalLM.from_pretrained(out).dtype == torch.bfloat16
    listing = subprocess.run([sys.executable, "-m", "rfthpc", "weights", "list", str(run.root)], env=trainer_env(),
                             cwd=ROOT, capture_output=True, text=True, check=False)
    assert listing.returncode == 0 and "(latest)" in listing.stdout
    missing = subprocess.run([sys.executable, "-m", "rfthpc", "weights", "materialize", str(run.root), "--version",
                              "9", "--out", str(tmp_path / "v9")], env=trainer_env(), cwd=ROOT, capture_output=True, check=False,
                             text=True)
    assert missing.returncode == 2 and "version 9 cannot be rebuilt" in missing.stderr
    assert "full snapshots [1, 5]" in missing.stderr


def _corrupt(path: Path) -> None:
    """Flip one byte in the middle of the file's frames (the footer stays readable)."""
    footer = read_footer(path)
    entry = max(footer.tensors, key=lambda t: t.length)
    data = bytearray(path.read_bytes())
    data[entry.offset + entry.length // 2] ^= 0xFF
    path.chmod(stat.S_IWUSR | stat.S_IRUSR)
    path.write_bytes(bytes(data))


def test_a_corrupt_delta_is_detected(run: RunDir, tiny_model: Path) -> None:
    _publish_versions(run, tiny_model, range(1, 4), full_every=10)
    _corrupt(weights.delta_file(run.root, 2))
    with pytest.raises(DeltaCorrupt, match="delta_2.rfd"):
        _rebuilt(run, weight_chain.plan_chain(run.root, 3))


def _engine(model: Path) -> TransformersEngine:
    return TransformersEngine(EngineSettings(model_path=str(model)))


def _engine_state(engine: TransformersEngine, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    tied = engine.model.config.tie_word_embeddings
    return {k: v.to(dtype) for k, v in engine.model.state_dict().items() if not (tied and k == "lm_head.weight")}


def test_a_late_explorer_starts_from_the_newest_snapshot_and_prefetches_the_deltas(
        run: RunDir, tiny_model: Path, tmp_path: Path) -> None:
    truth = _publish_versions(run, tiny_model, range(1, 7), full_every=4)
    follower = WeightFollower(run, "ex", 0, staging_root=tmp_path / "staging")
    version, path = follower.start_point(str(tiny_model))
    assert (version, path) == (5, str(weights.step_dir(run.root, 5)))
    engine = _engine(Path(path))
    follower.attach(engine, version, background=False)
    try:
        assert follower.prefetch(6)
        assert follower.ready() == 6 and follower.version == 5     # staged, not yet loaded
        assert follower.update() and follower.version == 6
        assert _equal(_engine_state(engine), truth[6])
        stats = follower.stats
        assert stats.from_full and stats.bytes_read > 0 and stats.stall_s > 0 and stats.load_s > 0
        # The next version comes as a delta applied to the staged bits: only its bytes are read.
        _publish_more(run, tiny_model, truth, 7)
        assert follower.prefetch(7) and follower.update()
        assert _equal(_engine_state(engine), truth[7])
        assert not follower.stats.from_full
        assert follower.stats.bytes_read == sum(t.length for t in read_footer(weights.delta_file(run.root, 7)).tensors)
        lease = weights.live_readers(run.root, 300)
        assert [(x.version, x.held) for x in lease] == [(7, 7)]
        assert [p.name for p in follower.staging.iterdir() if p.name.startswith("v")] == ["v7"]
    finally:
        follower.close()
    assert not follower.staging.exists() and weights.live_readers(run.root, 300) == []


def _publish_more(run: RunDir, model: Path, truth: dict[int, dict[str, torch.Tensor]], version: int) -> None:
    """Publish `version` as a delta on the newest version in `truth` (a publisher that held it)."""
    prev = max(truth)
    publisher = Publisher(run.root, model, torch.bfloat16, "on", full_every=100)
    publisher._bits = {k: t.clone() for k, t in truth[prev].items()}
    publisher._crcs = {k: _crc(t) for k, t in truth[prev].items()}
    publisher._version = prev
    state = {k: t.float() for k, t in truth[prev].items()}
    _train(state, version)
    publisher.publish(version, weights.TensorStream.of(state, torch.bfloat16))
    truth[version] = {k: t.to(torch.bfloat16) for k, t in state.items()}


def _crc(t: torch.Tensor) -> int:
    from rfthpc.weights.delta import tensor_crc

    return tensor_crc(t)


def test_a_corrupt_delta_falls_back_to_the_newest_snapshot_and_is_counted(run: RunDir, tiny_model: Path,
                                                                        tmp_path: Path) -> None:
    truth = _publish_versions(run, tiny_model, range(1, 4), full_every=3)     # full 1, deltas 2 and 3
    follower = WeightFollower(run, "ex", 0, staging_root=tmp_path / "staging")
    version, path = follower.start_point(str(tiny_model))
    follower.attach(_engine(Path(path)), version, background=False)
    try:
        assert follower.prefetch(1) is False                    # version 1 is what the engine holds
        _corrupt(weights.delta_file(run.root, 3))
        assert follower.prefetch(3) is False and follower.stats.checksum_failures == 1
        # Never again: the newest version its files allow is version 2 (snapshot 1 + delta 2).
        assert follower.prefetch(3) and follower.update() and follower.version == 2
        assert _equal(_engine_state(follower.engine), truth[2])
        # Version 4's delta is based on the bad version 3: still unreachable.
        _publish_more(run, tiny_model, truth, 4)
        assert not follower.prefetch(4) and follower.version == 2
        # The trainer's next full snapshot lets it catch up.
        weights.write_snapshot(run.root, 5, truth[4], tiny_model, torch.bfloat16)
        weights.point_latest(run.root, 5)
        assert follower.prefetch(5) and follower.update() and follower.version == 5
        assert _equal(_engine_state(follower.engine), truth[4])
        assert follower.stats.checksum_failures == 1
    finally:
        follower.close()


def test_a_requeued_explorer_discards_its_old_staging(run: RunDir, tiny_model: Path, tmp_path: Path) -> None:
    truth = _publish_versions(run, tiny_model, range(1, 4), full_every=10)
    first = WeightFollower(run, "ex", 0, staging_root=tmp_path / "staging")
    first.attach(_engine(tiny_model), 0, background=False)
    assert first.prefetch(3) and first.update()
    # Preempted: no close(); its staging stays behind. The requeued process starts afresh.
    first._closing.set()
    leftover = first.staging / "v3" / "model.safetensors"
    assert leftover.is_file()
    second = WeightFollower(run, "ex", 0, staging_root=tmp_path / "staging")
    version, path = second.start_point(str(tiny_model))
    assert version == 1
    second.attach(_engine(Path(path)), version, background=False)
    try:
        assert not leftover.exists()
        assert second.prefetch(3) and second.update() and second.stats.from_full
        assert _equal(_engine_state(second.engine), truth[3])
    finally:
        second.close()


def test_clean_up_keeps_every_file_a_live_readers_chain_needs(run: RunDir, tiny_model: Path) -> None:
    _publish_versions(run, tiny_model, range(1, 11), full_every=3)     # full 1, 4, 7, 10
    weights.record_reader(run.root, "slow", 0, 3, held=3)             # holds 3, follows the deltas after it
    weights.record_reader(run.root, "new", 0, 5)                      # rebuilding 5 from snapshot 4
    removed = weight_chain.collect_published(run.root, keep=2, lease_s=300)
    full, deltas = weights.published_versions(run.root)
    assert full == {4, 7, 10} and deltas == set(range(4, 11)) and removed == [1, 2, 3]
    # Every version a reader may ask for still rebuilds.
    assert weight_chain.plan_chain(run.root, 10, held=3) == weight_chain.Chain(10, 3, False, tuple(range(4, 11)))
    assert weight_chain.plan_chain(run.root, 5) == weight_chain.Chain(5, 4, True, (5,))
    # Once the readers are gone: the chains of latest and of the newest two versions.
    weights.clear_reader(run.root, "slow", 0)
    weights.clear_reader(run.root, "new", 0)
    assert weight_chain.collect_published(run.root, keep=2, lease_s=300) == [4, 5, 6, 7, 10]
    assert weights.published_versions(run.root) == ({7, 10}, {8, 9})


def test_a_publisher_killed_while_writing_a_delta_leaves_no_version(run: RunDir, tiny_model: Path) -> None:
    script = f"""
import torch
from rfthpc.weights import published as weights
from rfthpc.weights.publisher import Publisher
state = {{f"w{{i}}": torch.randn(1024, 1024) for i in range(48)}}
p = Publisher({str(run.root)!r}, {str(tiny_model)!r}, torch.bfloat16, "on", full_every=100)
p.publish(1, weights.TensorStream.of(state, torch.bfloat16))
for t in state.values():
    t.add_(torch.randn_like(t))
print("ready", flush=True)
p.publish(2, weights.TensorStream.of(state, torch.bfloat16))
"""
    assert kill_while_writing(script, run.weights, ".tmp-delta_2")
    assert weights.read_latest(run.root) == 1 and weights.published_versions(run.root) == ({1}, set())
    weight_chain.collect_published(run.root, keep=3, lease_s=300)
    assert not [n for n in os.listdir(run.weights) if n.startswith(".tmp-")]


def test_weight_files_get_the_configured_lustre_stripe_count(run: RunDir, tiny_model: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Where `lfs` exists (Lustre clients), new snapshot directories and delta files are striped; this
    machine has no Lustre, so `lfs` is a script recording its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "lfs.log"
    (bin_dir / "lfs").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    (bin_dir / "lfs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    state = load_file(str(tiny_model / "model.safetensors"))
    p = Publisher(run.root, tiny_model, torch.bfloat16, "on", full_every=10, stripe_count=8)
    p.publish(1, weights.TensorStream.of(state, torch.bfloat16))
    p.publish(2, weights.TensorStream.of({k: v + 1 for k, v in state.items()}, torch.bfloat16))
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all(c.startswith("setstripe -c 8 ") for c in calls)
    assert ".tmp-step_1-" in calls[0] and ".tmp-delta_2-" in calls[1]
    log.unlink()
    Publisher(run.root, tiny_model, torch.bfloat16, "on", stripe_count=0).publish(
        3, weights.TensorStream.of(state, torch.bfloat16))
    assert not log.exists()


def test_the_background_prefetcher_stages_each_new_version_while_the_explorer_works(
        run: RunDir, tiny_model: Path, tmp_path: Path) -> None:
    """The prefetch thread notices `latest` change and stages the version; the explorer's `update`
    only copies it in (nothing is loaded before the explorer asks)."""
    truth = _publish_versions(run, tiny_model, range(1, 3), full_every=10)
    follower = WeightFollower(run, "ex", 0, staging_root=tmp_path / "staging", poll_s=0.2)
    version, path = follower.start_point(str(tiny_model))
    follower.attach(_engine(Path(path)), version)
    try:
        for v in (2, 3, 4):
            if v > 2:
                _publish_more(run, tiny_model, truth, v)
            deadline = time.monotonic() + 120
            while follower.ready() != v:
                assert time.monotonic() < deadline, f"version {v} was never staged"
                time.sleep(0.02)
            assert follower.version == v - 1 if v > 2 else follower.version == 1
            assert follower.update() and _equal(_engine_state(follower.engine), truth[v])
        assert [h[0] for h in follower.stats.history] == [2, 3, 4]
    finally:
        follower.close()
