"""Published policies: how the trainer hands weights to explorers through the run directory.

    weights/step_<N>/                  a complete Hugging Face model directory (config.json,
                                       generation_config.json, model*.safetensors [+ index],
                                       tokenizer files, chat template) and a `STABLE` marker
    weights/latest                     text: N of the newest complete step (replaced atomically)
    weights/.readers/<explorer>-<rank>.json   {"version": N, "time": unix time} of each explorer

Publishing (trainer rank 0): write everything into `weights/.tmp-step_<N>-<tag>/`, fsync every
file, write `STABLE` last, rename the directory to `step_<N>`, then replace `latest`. A reader
accepts a step directory only if `STABLE` exists, so it never loads a partial policy.

Removal (`collect_published`): a step directory is deleted only if it is not among the
`keep` newest, not `latest`, and not named by a reader file fresher than the lease. Its `STABLE`
marker goes first, so a reader that lists it meanwhile skips it rather than loading half a
directory; the reader files are read again after that (a reader names a step before it checks
`STABLE`), and a step named there meanwhile gets its marker back and stays. Version 0 is the
initial model (`model.model_path`) until the trainer publishes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfthpc.fsutil import TMP_PREFIX, apply_mode, fsync_dir, make_dirs, read_json, write_json_atomic, write_text_atomic
from rfthpc.handoff import Doorbell
from rfthpc.rundir import RunDir

if TYPE_CHECKING:
    import torch

    from rfthpc.convert.writer import TensorEntry

STABLE = "STABLE"
LATEST = "latest"
READERS = ".readers"
MAX_SHARD_BYTES = 5 * 1024**3
"""Largest safetensors file written (Hugging Face's default shard size)."""

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".distcp")
"""Files that hold weights; everything else at the top of a model directory is configuration."""

_STEP_RE = re.compile(r"^step_(\d+)$")
_TMP_RE = re.compile(r"^" + re.escape(TMP_PREFIX) + r"step_\d+-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}$")
_TMP_MAX_AGE_S = 3600.0


def step_dir(run_dir: Path, step: int) -> Path:
    """Directory of the policy published after trainer step `step`."""
    return RunDir(run_dir).weights_step(step)


def is_complete(path: Path) -> bool:
    """True if `path` is a published step directory readers may load (its STABLE marker exists)."""
    return (Path(path) / STABLE).is_file()


def latest_doorbell(run_dir: Path) -> Doorbell:
    """The weights channel's doorbell: `weights/latest`, which every publication replaces."""
    return Doorbell(RunDir(run_dir).weights / LATEST)


def read_latest(run_dir: Path) -> int | None:
    """N of the newest published policy, or None if the trainer has published none."""
    try:
        return int((RunDir(run_dir).weights / LATEST).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def published_steps(run_dir: Path) -> list[int]:
    """Steps with a complete directory under weights/, ascending."""
    try:
        names = os.listdir(RunDir(run_dir).weights)
    except FileNotFoundError:
        return []
    steps = []
    for name in names:
        m = _STEP_RE.match(name)
        if m and is_complete(RunDir(run_dir).weights / name):
            steps.append(int(m[1]))
    return sorted(steps)


def is_weight_file(name: str) -> bool:
    """True for weight files and their shard indexes (`*.safetensors.index.json`)."""
    return name.endswith(WEIGHT_SUFFIXES) or name.endswith(".index.json")


def copy_config_files(src: Path, dst: Path) -> list[str]:
    """Copy the top-level non-weight files of model directory `src` (config, generation config,
    tokenizer, chat template) into `dst`; return their names."""
    make_dirs(dst)
    copied = []
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        name = entry.name
        if entry.is_file() and not name.startswith(".") and not is_weight_file(name) and name != STABLE:
            shutil.copyfile(entry.path, Path(dst) / name)
            copied.append(name)
    return copied


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    apply_mode(path, is_dir=False)


def _set_config_dtype(config_path: Path, dtype_name: str) -> None:
    """Record the dtype the weights are saved in (transformers >= 5 reads `dtype`, older `torch_dtype`)."""
    config = json.loads(config_path.read_text())
    keys = [k for k in ("dtype", "torch_dtype") if k in config] or ["torch_dtype"]
    for k in keys:
        config[k] = dtype_name
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


@dataclass
class TensorStream:
    """Weights that arrive one tensor at a time (e.g. gathered from shards), so no process holds them all.

    `entries` (name, shape, dtype to store) come first; `tensors` then yields `(name, tensor)` in
    the same order.
    """

    entries: list[TensorEntry]
    tensors: Iterable[tuple[str, torch.Tensor]]

    @classmethod
    def of(cls, state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> TensorStream:
        """A stream over an in-memory state dict (sorted by name), stored in `dtype` (None: as is)."""
        from rfthpc.convert.writer import TensorEntry

        names = sorted(state_dict)
        return cls([TensorEntry(k, tuple(state_dict[k].shape), dtype or state_dict[k].dtype) for k in names],
                   ((k, state_dict[k]) for k in names))


def write_hf_dir(
    out: Path,
    weights: Mapping[str, torch.Tensor] | TensorStream,
    config_dir: Path,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> None:
    """Write a Hugging Face model directory into `out` (which should be new and private to the caller).

    Weights go to `model.safetensors`, or to `model-0000i-of-0000n.safetensors` shards with a
    `model.safetensors.index.json` when larger than `max_shard_bytes`, written tensor by tensor
    without copies; configuration files are copied from `config_dir`; config.json records the
    stored dtype. Every file is fsynced.
    """
    from rfthpc.convert.writer import write_shards

    make_dirs(out)
    config_files = copy_config_files(config_dir, out)
    stream = weights if isinstance(weights, TensorStream) else TensorStream.of(weights, dtype)
    if (out / "config.json").is_file() and stream.entries:
        _set_config_dtype(out / "config.json", str(stream.entries[0].dtype).removeprefix("torch."))
    # write_shards fsyncs the weight files it writes; the copied configuration is fsynced here.
    for name in write_shards(out, stream.entries, ((name, [t]) for name, t in stream.tensors), max_shard_bytes):
        apply_mode(out / name, is_dir=False)
    for name in config_files:
        _fsync_file(out / name)


def publish(
    run_dir: Path,
    step: int,
    weights: Mapping[str, torch.Tensor] | TensorStream,
    config_dir: Path,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path:
    """Publish `weights` as `weights/step_<step>` and point `latest` at it (if it is the newest).

    A step that is already published is left as it is (and a stream is not read): explorers may be
    loading it, and the experience tagged with this version came from those weights (a resumed
    trainer re-trains steps it had published before it stopped).
    """
    run = RunDir(run_dir)
    final = step_dir(run.root, step)
    if not is_complete(final):
        make_dirs(run.weights)
        tmp = run.weights / f"{TMP_PREFIX}step_{step}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            write_hf_dir(tmp, weights, config_dir, dtype, max_shard_bytes)
            (tmp / STABLE).write_text(f"{step}\n")
            _fsync_file(tmp / STABLE)
            fsync_dir(tmp)
            if final.exists():
                # A directory without STABLE is a leftover of a deleter that died; readers skip it.
                shutil.rmtree(final)
            os.rename(tmp, final)
            fsync_dir(run.weights)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    latest = read_latest(run.root)
    if latest is None or step > latest:
        write_text_atomic(run.weights / LATEST, f"{step}\n")
    return final


def reader_file(run_dir: Path, explorer: str, rank: int) -> Path:
    """Where explorer `explorer` rank `rank` records the version it is loading or using."""
    return RunDir(run_dir).weights / READERS / f"{explorer}-{rank}.json"


def record_reader(run_dir: Path, explorer: str, rank: int, version: int) -> None:
    """Record (and refresh, well within `filesystem.lease_s`) that this explorer needs `version`.

    Call it before loading `weights/step_<version>`, and keep refreshing it while using it.
    """
    path = reader_file(run_dir, explorer, rank)
    make_dirs(path.parent)
    write_json_atomic(path, {"version": int(version), "time": time.time()})


def clear_reader(run_dir: Path, explorer: str, rank: int) -> None:
    """Forget this explorer's reader file (it stopped and needs no published weights)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(reader_file(run_dir, explorer, rank))


def live_reader_versions(run_dir: Path, lease_s: float, now: float | None = None) -> set[int]:
    """Versions named by reader files refreshed within the last `lease_s` seconds."""
    now = time.time() if now is None else now
    d = RunDir(run_dir).weights / READERS
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return set()
    versions = set()
    for name in names:
        if not name.endswith(".json") or name.startswith(TMP_PREFIX):
            continue
        try:
            info = read_json(d / name)
        except ValueError:
            continue
        if isinstance(info, dict) and now - float(info.get("time", 0)) <= lease_s and "version" in info:
            versions.add(int(info["version"]))
    return versions


def _tmp_is_stale(path: Path, now: float) -> bool:
    from rfthpc.locks import process_gone

    m = _TMP_RE.match(path.name)
    if m is not None and m["host"] == socket.gethostname() and process_gone(int(m["pid"])):
        return True
    try:
        return now - path.stat().st_mtime > _TMP_MAX_AGE_S
    except FileNotFoundError:
        return False


def collect_published(run_dir: Path, keep: int, lease_s: float, now: float | None = None) -> list[int]:
    """Delete published steps no explorer can still need (see the module docstring); return them.

    Also removes temporary directories of publishers that died (same host and process gone, or
    older than an hour).
    """
    run = RunDir(run_dir)
    now = time.time() if now is None else now
    steps = published_steps(run.root)
    protected = set(steps[-keep:]) if keep > 0 else set()
    latest = read_latest(run.root)
    if latest is not None:
        protected.add(latest)
    protected |= live_reader_versions(run.root, lease_s, now)
    doomed = [step for step in steps if step not in protected]
    for step in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(step_dir(run.root, step) / STABLE)
    # An explorer that named a step in its reader file after the look above, and saw its STABLE
    # before it went, may be loading it now: look again once no newcomer can see the marker.
    late = live_reader_versions(run.root, lease_s, time.time())
    removed = []
    for step in doomed:
        path = step_dir(run.root, step)
        if step in late:
            write_text_atomic(path / STABLE, f"{step}\n")
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(step)
    try:
        names = os.listdir(run.weights)
    except FileNotFoundError:
        names = []
    for name in names:
        if name.startswith(f"{TMP_PREFIX}step_") and _tmp_is_stale(run.weights / name, now):
            shutil.rmtree(run.weights / name, ignore_errors=True)
    return removed
