"""Published policies: how the trainer hands weights to explorers through the run directory.

    weights/step_<N>/                  a full snapshot: a complete Hugging Face model directory
                                       (config.json, generation_config.json, model*.safetensors
                                       [+ index], tokenizer files, chat template), the CRC-32 of
                                       every tensor (`rfthpc_checksums.json`) and a `STABLE` marker;
                                       with LoRA (`model.lora`) a PEFT adapter instead
                                       (adapter_config.json, adapter_model.safetensors)
    weights/delta_<N>.rfd              version N as the XOR of version B's bits (`rfthpc.weights.delta`)
    weights/latest/<n>                 a journal: each entry the N of a publication, the newest entry the
                                       newest published version (`rfthpc.sharedfs.journal`; a new name per
                                       publication, so explorers on other nodes see it at once)
    weights/.readers/<explorer>-<rank>.json   what each explorer is reading (`ReaderLease`)
    weights/.requests/                 explorers asking for weights (`sync_style: explorer_driven`,
                                       `rfthpc.weights.asking`)

A version has a full snapshot, a delta, or both; every K-th is full (`rfthpc.weights.publisher`;
an adapter, a few megabytes, is published whole every time),
and `rfthpc.weights.chain` finds how to rebuild any version and removes what nobody needs.

Publishing a snapshot (trainer rank 0): write everything into `weights/.tmp-step_<N>-<tag>/`,
fsync every file, write `STABLE` last, rename the directory to `step_<N>`; a delta file is written
under a temporary name, fsynced and renamed. The `latest` entry is appended after both. A reader accepts a
step directory only if `STABLE` exists, so it never loads a partial policy. Version 0 is the
initial model (`model.model_path`) until the trainer publishes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfthpc.config.lora import ADAPTER_CONFIG
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import (
    TMP_PREFIX,
    apply_mode,
    fsync_dir,
    make_dirs,
    read_json,
    write_json_atomic,
)
from rfthpc.sharedfs.handoff import Doorbell
from rfthpc.sharedfs.journal import journal_at

if TYPE_CHECKING:
    import torch

    from rfthpc.weights.safetensors_write import TensorEntry

log = logging.getLogger(__name__)

STABLE = "STABLE"
CHECKSUMS = "rfthpc_checksums.json"
"""CRC-32 of every tensor of a full snapshot, and the version's checksum."""
LATEST = "latest"
READERS = ".readers"
MAX_SHARD_BYTES = 5 * 1024**3
"""Largest safetensors file written (Hugging Face's default shard size)."""

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".distcp")
"""Files that hold weights; everything else at the top of a model directory is configuration."""

_STEP_RE = re.compile(r"^step_(\d+)$")
_DELTA_RE = re.compile(r"^delta_(\d+)\.rfd$")
TMP_RE = re.compile(r"^" + re.escape(TMP_PREFIX)
                    + r"(step_\d+|delta_\d+|config)-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}(\.rfd)?$")
"""Temporary names of snapshots, deltas and staged configurations being written (the writer's host and
pid in them)."""
CONFIG_PREFIX = ".config-"
"""weights/.config-<digest>: the configuration files every snapshot links (`staged_config`)."""
# Where a filesystem refuses hard links (or across filesystems) a snapshot copies its configuration.
_NO_LINKS = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP})
_TMP_MAX_AGE_S = 3600.0


def step_dir(run_dir: Path, step: int) -> Path:
    """Directory of the policy published after trainer step `step`."""
    return RunDir(run_dir).weights_step(step)


def delta_file(run_dir: Path, version: int) -> Path:
    """The delta file of version `version`."""
    return RunDir(run_dir).weights / f"delta_{version}.rfd"


def temporary_path(run_dir: Path, final_name: str, suffix: str = "") -> Path:
    """A private temporary name under weights/ for a snapshot or delta being written (host and pid
    in it, so clean-up knows when its writer is gone)."""
    tag = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return RunDir(run_dir).weights / f"{TMP_PREFIX}{final_name}-{tag}{suffix}"


def is_complete(path: Path) -> bool:
    """True if `path` is a published step directory readers may load (its STABLE marker exists)."""
    return (Path(path) / STABLE).is_file()


LATEST_KEPT = 64
"""Entries of `weights/latest` left behind the newest."""


def latest_doorbell(run_dir: Path) -> Doorbell:
    """The weights channel's doorbell: the journal `weights/latest`, which every publication appends to."""
    return Doorbell(RunDir(run_dir).weights / LATEST, keep=LATEST_KEPT)


def read_latest(run_dir: Path) -> int | None:
    """N of the newest published policy, or None if the trainer has published none."""
    _, data = journal_at(RunDir(run_dir).weights / LATEST, keep=LATEST_KEPT).latest()
    try:
        return None if data is None else int(data.decode().strip())
    except ValueError:
        return None


def published_steps(run_dir: Path) -> list[int]:
    """Versions with a complete full snapshot under weights/, ascending."""
    return sorted(published_versions(run_dir)[0])


def published_versions(run_dir: Path) -> tuple[set[int], set[int]]:
    """(versions with a complete full snapshot, versions with a delta file), from one listing."""
    weights = RunDir(run_dir).weights
    try:
        names = os.listdir(weights)
    except FileNotFoundError:
        return set(), set()
    full, deltas = set(), set()
    for name in names:
        if (m := _STEP_RE.match(name)) and is_complete(weights / name):
            full.add(int(m[1]))
        elif m := _DELTA_RE.match(name):
            deltas.add(int(m[1]))
    return full, deltas


def is_published(run_dir: Path, version: int) -> bool:
    """True if version `version` has a complete full snapshot or a delta file."""
    return is_complete(step_dir(run_dir, version)) or delta_file(run_dir, version).is_file()


def is_adapter_dir(path: Path | str) -> bool:
    """True for a PEFT adapter directory (a LoRA run's published version): its weights apply to the
    base model, they are not a model."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def is_weight_file(name: str) -> bool:
    """True for weight files and their shard indexes (`*.safetensors.index.json`)."""
    return name.endswith(WEIGHT_SUFFIXES) or name.endswith(".index.json")


def config_file_names(src: Path) -> list[str]:
    """The top-level non-weight files of model directory `src` (config, generation config, tokenizer,
    chat template), sorted."""
    return sorted(e.name for e in os.scandir(src) if e.is_file() and not e.name.startswith(".")
                  and not is_weight_file(e.name) and e.name not in (STABLE, CHECKSUMS))


def copy_config_files(src: Path, dst: Path) -> list[str]:
    """Copy the configuration files of model directory `src` (`config_file_names`) into `dst`; return
    their names."""
    make_dirs(dst)
    names = config_file_names(src)
    for name in names:
        shutil.copyfile(Path(src) / name, Path(dst) / name)
    return names


def staged_config(run_dir: Path, config_dir: Path, dtype_name: str) -> Path:
    """The configuration files of `config_dir`, ready for every snapshot of this run to link:
    weights/.config-<digest of their names, bytes and `dtype_name`>, its config.json recording
    `dtype_name` and every file fsynced.

    Why: copying and syncing a dozen tokenizer and config files into each published version costs
    several metadata round trips per file on a network filesystem (about 40 ms a version on the
    test bed's GlusterFS); a hard link is one. The digest names the content, so a resumed trainer
    reuses the directory and a different model gets its own.
    """
    names = config_file_names(config_dir)
    digest = hashlib.sha256(dtype_name.encode())
    for name in names:
        digest.update(f"\0{name}\0".encode() + (Path(config_dir) / name).read_bytes())
    run = RunDir(run_dir)
    final = run.weights / f"{CONFIG_PREFIX}{digest.hexdigest()[:16]}"
    if final.is_dir():
        return final
    make_dirs(run.weights)
    tmp = temporary_path(run.root, "config")
    try:
        copy_config_files(config_dir, tmp)
        if (tmp / "config.json").is_file():
            _set_config_dtype(tmp / "config.json", dtype_name)
        for name in names:
            _fsync_file(tmp / name)
        fsync_dir(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp)  # another publisher staged the same files first
        fsync_dir(run.weights)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _link_config_files(staged: Path, dst: Path) -> None:
    """Hard-link every file of `staged` (a `staged_config` directory) into `dst`; copy (and fsync)
    where the filesystem refuses links."""
    for name in config_file_names(staged):
        try:
            os.link(staged / name, dst / name)
            continue
        except OSError as e:
            if e.errno not in _NO_LINKS:
                raise
        shutil.copyfile(staged / name, dst / name)
        _fsync_file(dst / name)


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
        from rfthpc.weights.safetensors_write import TensorEntry

        names = sorted(state_dict)
        return cls([TensorEntry(k, tuple(state_dict[k].shape), dtype or state_dict[k].dtype) for k in names],
                   ((k, state_dict[k]) for k in names))


def write_hf_dir(
    out: Path,
    weights: Mapping[str, torch.Tensor] | TensorStream,
    config_dir: Path,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
    staged: bool = False,
) -> None:
    """Write a Hugging Face model directory into `out` (which should be new and private to the caller).

    Weights go to `model.safetensors`, or to `model-0000i-of-0000n.safetensors` shards with a
    `model.safetensors.index.json` when larger than `max_shard_bytes`, written tensor by tensor
    without copies; configuration files are copied from `config_dir`; config.json records the
    stored dtype. Every file is fsynced. With `staged`, `config_dir` is a `staged_config` directory
    and its files are linked as they are.
    """
    from rfthpc.weights.safetensors_write import write_shards

    make_dirs(out)
    stream = weights if isinstance(weights, TensorStream) else TensorStream.of(weights, dtype)
    if staged:
        _link_config_files(config_dir, out)
        config_files = []
    else:
        config_files = copy_config_files(config_dir, out)
        if (out / "config.json").is_file() and stream.entries:
            _set_config_dtype(out / "config.json", str(stream.entries[0].dtype).removeprefix("torch."))
    # write_shards fsyncs the weight files it writes; the copied configuration is fsynced here.
    for name in write_shards(out, stream.entries, ((name, [t]) for name, t in stream.tensors), max_shard_bytes):
        apply_mode(out / name, is_dir=False)
    for name in config_files:
        _fsync_file(out / name)


def write_adapter_dir(out: Path, weights: TensorStream, adapter_config: Mapping[str, object]) -> None:
    """Write a PEFT adapter directory into `out` (new, private to the caller): `adapter_config.json`
    and the adapter's tensors (PEFT's names) in one `adapter_model.safetensors`, each fsynced."""
    from rfthpc.weights.safetensors_write import write_shards

    make_dirs(out)
    (out / ADAPTER_CONFIG).write_text(json.dumps(adapter_config, indent=2, sort_keys=True) + "\n")
    _fsync_file(out / ADAPTER_CONFIG)
    # peft reads one file: adapters are megabytes, never sharded.
    for name in write_shards(out, weights.entries, ((name, [t]) for name, t in weights.tensors), 2**62,
                             stem="adapter_model"):
        apply_mode(out / name, is_dir=False)


def write_checksums(path: Path, version: int, crcs: Mapping[str, int]) -> None:
    """Record the CRC-32 of every tensor of full snapshot `path` (not yet STABLE) and fsync it."""
    from rfthpc.weights.delta import version_checksum

    (path / CHECKSUMS).write_text(json.dumps({"version": version, "checksum": version_checksum(crcs),
                                              "tensors": dict(crcs)}, sort_keys=True) + "\n")
    _fsync_file(path / CHECKSUMS)


def read_checksums(path: Path) -> dict[str, int] | None:
    """The recorded CRC-32 of every tensor of full snapshot `path`; None if it records none (a
    snapshot of an older rfthpc, or the initial model)."""
    try:
        data = read_json(Path(path) / CHECKSUMS)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tensors"), dict):
        return None
    return {str(k): int(v) for k, v in data["tensors"].items()}


def write_snapshot(
    run_dir: Path,
    step: int,
    weights: Mapping[str, torch.Tensor] | TensorStream,
    config_dir: Path,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
    on_tensor: Callable[[str, torch.Tensor, int], None] | None = None,
    stripe_count: int = 0,
    adapter_config: Mapping[str, object] | None = None,
    staged: bool = False,
) -> Path:
    """Write `weights` as the full snapshot `weights/step_<step>` (STABLE last); `latest` is not touched.

    Every tensor is cast to its stored dtype, checksummed and handed to `on_tensor(name, tensor,
    crc)` before it is written (the delta publisher reads the same pass). `stripe_count` > 0 sets
    the Lustre stripe count of the new directory (`set_stripe`). With `adapter_config` the snapshot
    is a PEFT adapter directory (`write_adapter_dir`; `config_dir` is not read). With `staged`,
    `config_dir` is a `staged_config` directory whose files are linked.
    """
    from rfthpc.weights.delta import tensor_crc

    run = RunDir(run_dir)
    final = step_dir(run.root, step)
    make_dirs(run.weights)
    tmp = temporary_path(run.root, f"step_{step}")
    stream = weights if isinstance(weights, TensorStream) else TensorStream.of(weights, dtype)
    crcs: dict[str, int] = {}
    stored = {e.name: e.dtype for e in stream.entries}

    def checked() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in stream.tensors:
            tensor = tensor.to(stored[name]).contiguous()
            crcs[name] = tensor_crc(tensor)
            if on_tensor is not None:
                on_tensor(name, tensor, crcs[name])
            yield name, tensor

    try:
        make_dirs(tmp)
        set_stripe(tmp, stripe_count)
        if adapter_config is None:
            write_hf_dir(tmp, TensorStream(stream.entries, checked()), config_dir, dtype, max_shard_bytes, staged)
        else:
            write_adapter_dir(tmp, TensorStream(stream.entries, checked()), adapter_config)
        write_checksums(tmp, step, crcs)
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
    return final


def point_latest(run_dir: Path, version: int) -> None:
    """Make `latest` name `version` if it is newer than the version it names (it never goes back): a
    new entry, which also rings the weights channel's doorbell."""
    latest = read_latest(run_dir)
    if latest is None or version > latest:
        journal_at(RunDir(run_dir).weights / LATEST, keep=LATEST_KEPT).append(f"{version}\n".encode())


def publish(
    run_dir: Path,
    step: int,
    weights: Mapping[str, torch.Tensor] | TensorStream,
    config_dir: Path,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path:
    """Publish `weights` as the full snapshot `weights/step_<step>` and point `latest` at it (if newest).

    A version that is already published is left as it is (and a stream is not read): explorers may
    be loading it, and the experience tagged with this version came from those weights (a resumed
    trainer re-trains steps it had published before it stopped).
    """
    if not is_published(run_dir, step):
        write_snapshot(run_dir, step, weights, config_dir, dtype, max_shard_bytes)
    point_latest(run_dir, step)
    return step_dir(run_dir, step)


_stripe_warned = False


def set_stripe(path: Path, count: int) -> None:
    """On Lustre, give `path` (a new directory, or a file not yet written) `count` stripes, so large
    weight files spread over that many storage targets; nothing when `count` is 0 or `lfs` is not
    installed. A failure is logged once and the write goes on with the default layout."""
    global _stripe_warned
    lfs = shutil.which("lfs") if count > 0 else None
    if lfs is None:
        return
    result = subprocess.run([lfs, "setstripe", "-c", str(count), str(path)], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0 and not _stripe_warned:
        _stripe_warned = True
        log.warning("lfs setstripe -c %d %s failed (%s); weight files keep the directory's default layout",
                    count, path, result.stderr.strip() or f"exit {result.returncode}")


@dataclass(frozen=True)
class ReaderLease:
    """What one explorer process needs of weights/ (its reader file, refreshed while fresh).

    `version`: the version it is loading or holds; `held`: the version whose bits it keeps locally
    and continues from with deltas (None: it rebuilds from a full snapshot), so every delta after
    `held` is kept for it.
    """

    version: int
    held: int | None
    time: float


def reader_file(run_dir: Path, explorer: str, rank: int) -> Path:
    """Where explorer `explorer` rank `rank` records what it reads."""
    return RunDir(run_dir).weights / READERS / f"{explorer}-{rank}.json"


def record_reader(run_dir: Path, explorer: str, rank: int, version: int, held: int | None = None) -> None:
    """Record (and refresh, well within `filesystem.lease_s`) that this explorer needs `version`
    (and the deltas after `held`). Call it before reading the files, and keep refreshing it."""
    path = reader_file(run_dir, explorer, rank)
    make_dirs(path.parent)
    write_json_atomic(path, {"version": int(version), "held": None if held is None else int(held),
                             "time": time.time()})


def clear_reader(run_dir: Path, explorer: str, rank: int) -> None:
    """Forget this explorer's reader file (it stopped and needs no published weights)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(reader_file(run_dir, explorer, rank))


def live_readers(run_dir: Path, lease_s: float, now: float | None = None) -> list[ReaderLease]:
    """The reader files refreshed within the last `lease_s` seconds."""
    now = time.time() if now is None else now
    d = RunDir(run_dir).weights / READERS
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    leases = []
    for name in names:
        if not name.endswith(".json") or name.startswith(TMP_PREFIX):
            continue
        try:
            info = read_json(d / name)
            lease = ReaderLease(int(info["version"]), None if info.get("held") is None else int(info["held"]),
                                float(info.get("time", 0)))
        except (ValueError, KeyError, TypeError):
            continue
        if now - lease.time <= lease_s:
            leases.append(lease)
    return leases


def tmp_is_stale(path: Path, now: float) -> bool:
    """True for a temporary snapshot or delta whose writer is gone (same host, process gone) or
    that is older than an hour."""
    from rfthpc.sharedfs.locks import process_gone

    m = TMP_RE.match(path.name)
    if m is not None and m["host"] == socket.gethostname() and process_gone(int(m["pid"])):
        return True
    try:
        return now - path.stat().st_mtime > _TMP_MAX_AGE_S
    except FileNotFoundError:
        return False
