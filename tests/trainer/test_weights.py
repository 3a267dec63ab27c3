"""Weight publishing: complete HF directories appear atomically, and are removed only when no
explorer can still need them."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import write_json_atomic
from rfthpc.weights import chain as weight_chain
from rfthpc.weights import published as weights
from tests.trainer.conftest import kill_while_writing


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir(tmp_path / "run").create()


def _model_state(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "model.safetensors"))


def test_publish_writes_a_complete_loadable_model(run: RunDir, tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    state = {k: v + 1.0 for k, v in _model_state(tiny_model).items()}
    path = weights.publish(run.root, 3, state, tiny_model, torch.float32)
    assert path == run.weights / "step_3" and weights.is_complete(path)
    assert weights.read_latest(run.root) == 3 and weights.published_steps(run.root) == [3]
    names = set(os.listdir(path))
    assert {"config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja", "model.safetensors",
            "STABLE"} <= names
    assert not [n for n in os.listdir(run.weights) if n.startswith(".tmp-")]
    model = AutoModelForCausalLM.from_pretrained(path)
    loaded = model.state_dict()
    for k, v in state.items():
        assert torch.equal(loaded[k], v)
    assert AutoTokenizer.from_pretrained(path).chat_template


def test_publish_in_bfloat16_records_the_dtype(run: RunDir, tiny_model: Path) -> None:
    import json

    path = weights.publish(run.root, 1, _model_state(tiny_model), tiny_model, torch.bfloat16)
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    assert all(t.dtype == torch.bfloat16 for t in load_file(str(path / "model.safetensors")).values())


def test_republishing_a_step_keeps_it_and_latest_never_goes_back(run: RunDir, tiny_model: Path) -> None:
    state = _model_state(tiny_model)
    weights.publish(run.root, 5, state, tiny_model)
    before = (run.weights / "step_5" / "model.safetensors").stat().st_mtime_ns
    weights.publish(run.root, 5, {k: v * 0 for k, v in state.items()}, tiny_model)
    assert (run.weights / "step_5" / "model.safetensors").stat().st_mtime_ns == before
    weights.publish(run.root, 4, state, tiny_model)  # a resumed trainer re-training older steps
    assert weights.read_latest(run.root) == 5 and weights.published_steps(run.root) == [4, 5]


def test_large_models_are_sharded_with_an_index(run: RunDir, tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    state = _model_state(tiny_model)
    path = weights.publish(run.root, 1, state, tiny_model, max_shard_bytes=100_000)
    shards = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert (path / "model.safetensors.index.json").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(path).state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


def test_collection_keeps_latest_newest_and_what_live_explorers_use(run: RunDir, tiny_model: Path) -> None:
    state = _model_state(tiny_model)
    for step in range(6):
        weights.publish(run.root, step, state, tiny_model)
    now = time.time()
    weights.record_reader(run.root, "ex", 0, 1)                       # a live explorer on version 1
    write_json_atomic(weights.reader_file(run.root, "ex", 1), {"version": 2, "time": now - 1000})  # a dead one
    removed = weight_chain.collect_published(run.root, keep=2, lease_s=300)
    assert sorted(removed) == [0, 2, 3]
    assert weights.published_steps(run.root) == [1, 4, 5]
    weights.clear_reader(run.root, "ex", 0)
    assert weight_chain.collect_published(run.root, keep=1, lease_s=300) == [1, 4]
    assert weights.published_steps(run.root) == [5] and weights.read_latest(run.root) == 5


def test_a_step_an_explorer_names_during_collection_is_kept(run: RunDir, tiny_model: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An explorer names step 1 in its reader file just after the collector read the reader files
    (and, having seen STABLE, starts loading it): the collector looks again after removing STABLE,
    puts the marker back and keeps the step."""
    state = _model_state(tiny_model)
    for step in range(4):
        weights.publish(run.root, step, state, tiny_model)
    first_look = weights.live_readers
    looks = []

    def explorer_names_step_1_meanwhile(*args, **kwargs):
        leases = first_look(*args, **kwargs)
        if not looks:
            weights.record_reader(run.root, "ex", 0, 1)
        looks.append({lease.version for lease in leases})
        return leases

    monkeypatch.setattr(weights, "live_readers", explorer_names_step_1_meanwhile)
    assert weight_chain.collect_published(run.root, keep=2, lease_s=300) == [0]
    assert looks == [set(), {1}]
    assert weights.published_steps(run.root) == [1, 2, 3] and weights.is_complete(weights.step_dir(run.root, 1))


def test_an_explorer_starting_while_its_step_is_removed_takes_the_newer_one(run: RunDir, tiny_model: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The explorer reads `latest` (step 1), the trainer publishes step 2 and removes step 1 before the
    explorer's reader file names it: the explorer starts from step 2, not from a vanished directory."""
    from rfthpc.weights.follow import WeightFollower

    state = _model_state(tiny_model)
    weights.publish(run.root, 1, state, tiny_model)
    follower = WeightFollower(run, "ex", 0)
    name_version = follower.write_lease
    names = []

    def trainer_moves_on_meanwhile(version: int) -> None:
        if not names:
            weights.publish(run.root, 2, state, tiny_model)
            weight_chain.collect_published(run.root, keep=0, lease_s=300)
        names.append(version)
        name_version(version)

    monkeypatch.setattr(follower, "write_lease", trainer_moves_on_meanwhile)
    assert follower.start_point(str(tiny_model)) == (2, str(weights.step_dir(run.root, 2)))
    assert names == [1, 2] and weights.published_steps(run.root) == [2]


def test_a_directory_without_stable_is_not_a_policy(run: RunDir, tiny_model: Path) -> None:
    half = run.weights / "step_9"
    half.mkdir()
    (half / "config.json").write_text("{}")
    assert not weights.is_complete(half) and weights.published_steps(run.root) == []
    # Publishing that step replaces the leftover.
    weights.publish(run.root, 9, _model_state(tiny_model), tiny_model)
    assert weights.published_steps(run.root) == [9]


def test_a_publisher_killed_mid_write_leaves_no_policy(run: RunDir, tiny_model: Path) -> None:
    """SIGKILL while `publish` writes: readers see no new step; collection removes the leftover."""
    weights.publish(run.root, 0, _model_state(tiny_model), tiny_model)
    script = textwrap.dedent(f"""
        import torch
        from rfthpc.weights import published as weights
        state = {{f"w{{i}}": torch.full((1024, 1024), float(i)) for i in range(64)}}
        print("ready", flush=True)
        weights.publish({str(run.root)!r}, 1, state, {str(tiny_model)!r}, max_shard_bytes=8 * 1024 * 1024)
    """)
    leftovers = kill_while_writing(script, run.weights, ".tmp-step_1")
    assert leftovers, "killed before or after the write: cannot show a partial write"
    assert weights.published_steps(run.root) == [0] and weights.read_latest(run.root) == 0
    weight_chain.collect_published(run.root, keep=3, lease_s=300)
    assert not [n for n in os.listdir(run.weights) if n.startswith(".tmp-")]


def test_published_files_follow_the_runs_permission_policy(run: RunDir, tiny_model: Path) -> None:
    """Weight shards, their index and the copied configuration all get the run's file mode:
    private by default, group-shared when the run is."""
    import stat

    from rfthpc.sharedfs import fileops as fsutil

    state = _model_state(tiny_model)
    path = weights.publish(run.root, 1, state, tiny_model, torch.float32, max_shard_bytes=200_000)
    names = {p.name for p in path.iterdir()}
    assert "model.safetensors.index.json" in names and "config.json" in names and len(names) > 4
    assert {stat.S_IMODE(p.stat().st_mode) for p in path.iterdir()} == {0o600}
    fsutil.set_share_group(fsutil.grp.getgrgid(os.getgid()).gr_name)
    try:
        path = weights.publish(run.root, 2, state, tiny_model, torch.float32, max_shard_bytes=200_000)
    finally:
        fsutil.set_share_group(None)
    assert {stat.S_IMODE(p.stat().st_mode) for p in path.iterdir()} == {0o660}


def test_a_publisher_links_one_staged_configuration_into_every_version(run: RunDir, tiny_model: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The configuration files are copied once per run (weights/.config-<digest>, config.json recording
    the dtype) and hard-linked into each version; a resumed publisher reuses them; where the filesystem
    refuses links, each version gets copies that load the same."""
    import errno
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rfthpc.weights.publisher import Publisher

    state = _model_state(tiny_model)
    publisher = Publisher(run.root, tiny_model, torch.bfloat16, delta="off")
    for version in (1, 2):
        publisher.publish(version, weights.TensorStream.of(state))
    staged = [p for p in run.weights.iterdir() if p.name.startswith(weights.CONFIG_PREFIX)]
    assert len(staged) == 1
    names = sorted(p.name for p in staged[0].iterdir())
    assert "config.json" in names and "tokenizer.json" in names and not any(map(weights.is_weight_file, names))
    for version in (1, 2):
        for name in names:
            assert (weights.step_dir(run.root, version) / name).stat().st_ino == (staged[0] / name).stat().st_ino
    assert json.loads((weights.step_dir(run.root, 2) / "config.json").read_text())["dtype"] == "bfloat16"
    assert AutoModelForCausalLM.from_pretrained(weights.step_dir(run.root, 2)).dtype == torch.bfloat16
    assert AutoTokenizer.from_pretrained(weights.step_dir(run.root, 2)).chat_template

    real_link = os.link

    def no_links_in_snapshots(src: str | Path, dst: str | Path) -> None:
        if Path(dst).parent.name.startswith(".tmp-step_"):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_link(src, dst)

    monkeypatch.setattr(os, "link", no_links_in_snapshots)
    Publisher(run.root, tiny_model, torch.bfloat16, delta="off").publish(3, weights.TensorStream.of(state))
    assert [p for p in run.weights.iterdir() if p.name.startswith(weights.CONFIG_PREFIX)] == staged
    copied = weights.step_dir(run.root, 3)
    for name in names:
        assert (copied / name).stat().st_ino != (staged[0] / name).stat().st_ino
        assert (copied / name).read_bytes() == (staged[0] / name).read_bytes()
    assert AutoModelForCausalLM.from_pretrained(copied).dtype == torch.bfloat16
