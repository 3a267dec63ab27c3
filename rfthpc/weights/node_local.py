"""Published versions handed to explorers on the trainer's own node through node-local memory.

Where an explorer shares the trainer's node (`slurm.layout: colocated`, `rfthpc run`), the trainer
also writes each version it publishes as one safetensors file into node-local memory, in the same
pass over the gathered tensors as the publication itself:

    <staging root>/rfthpc-<run key>/published/v<N>/model.safetensors    the version, in the published dtype
    <staging root>/rfthpc-<run key>/published/v<N>/checksums.json       the CRC-32 of every tensor

(the staging root is `filesystem.staging_dir`, /dev/shm by default; the run key is that of the
explorers' own staging, `run_key`). The copy is renamed into place after the version's files in the
run directory are complete and before `weights/latest` names it, so an explorer woken by `latest`
finds it: a version found here is the published one, bit for bit. An explorer on that node
(`rfthpc.weights.follow`) hard-links the file into its staging instead of reading the shared
filesystem; anywhere else, or when the copy is gone, it reads the run directory as always. The
published version is still written to the run directory (explorers on other nodes and every resume
read it there).

The trainer keeps the newest `KEEP` copies (an explorer's link keeps a copy it took alive after
that), clears the folder when it starts and keeps only the newest copy when it ends (the explorers'
final evaluation loads it); an explorer that ends holding the newest copy's version clears the folder.
A node-local write that fails (memory
full) costs that version its copy, never the publication. LoRA adapters are not copied: a few
megabytes read from the run directory.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from rfthpc.weights.safetensors_write import TensorEntry, safetensors_header, tensor_bytes

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
CHECKSUMS_FILE = "checksums.json"
KEEP = 2
"""Copies the trainer keeps: the newest version, and the one before it an explorer may be linking."""


def default_staging_root() -> Path:
    """Node-local memory where there is some (/dev/shm), else the temporary directory."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def staging_root(configured: str) -> Path:
    """`filesystem.staging_dir`, or `default_staging_root()` where it is empty."""
    return Path(configured).expanduser() if configured else default_staging_root()


def run_key(run_root: Path) -> str:
    """The run's name in node-local folders: shared by the trainer and the explorers of one run directory."""
    return hashlib.sha1(str(Path(run_root).resolve()).encode()).hexdigest()[:12]


def node_local_dir(staging_root: Path, run_root: Path) -> Path:
    """Where the trainer of `run_root` leaves its node-local copies."""
    return staging_root / f"rfthpc-{run_key(run_root)}" / "published"


def version_dir(root: Path, version: int) -> Path:
    """The node-local copy of `version` under `root` (complete whenever it exists)."""
    return root / f"v{version}"


def read_copy(root: Path, version: int) -> tuple[Path, dict[str, int]] | None:
    """(the copy's safetensors file, its checksums), or None if this node has no copy of `version`."""
    folder = version_dir(root, version)
    try:
        crcs = json.loads((folder / CHECKSUMS_FILE).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    return folder / MODEL_FILE, {name: int(crc) for name, crc in crcs.items()}


def copies(root: Path) -> list[int]:
    """The versions with a copy under `root`, newest first."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted((int(n[1:]) for n in names if n.startswith("v") and n[1:].isdigit()), reverse=True)


def prune(root: Path, keep: int) -> None:
    """Remove all but the newest `keep` copies."""
    for old in copies(root)[keep:]:
        shutil.rmtree(version_dir(root, old), ignore_errors=True)


def link_or_copy(source: Path, dest: Path) -> None:
    """Hard-link a copy into an explorer's staging (no bytes move); copy it where links fail (another
    filesystem). FileNotFoundError: the trainer dropped it meanwhile."""
    try:
        os.link(source, dest)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        shutil.copyfile(source, dest)


def clear(root: Path) -> None:
    """Remove every copy."""
    shutil.rmtree(root, ignore_errors=True)


class NodeLocalCopy:
    """One version's node-local copy, written tensor by tensor as the publication reads them."""

    def __init__(self, root: Path, version: int, entries: list[TensorEntry]) -> None:
        self.root = root
        self.version = version
        self._expected = iter(entries)
        self._crcs: dict[str, int] = {}
        self._tmp = root / f".tmp-v{version}-{os.getpid()}"
        self._file: BinaryIO | None = None
        try:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp.mkdir(parents=True)
            self._file = open(self._tmp / MODEL_FILE, "wb")  # noqa: SIM115 (closed by commit or abort)
            self._file.write(safetensors_header(entries))
        except OSError as e:
            self._fail(e)

    def add(self, name: str, tensor: torch.Tensor, crc: int) -> None:
        """Append the next tensor (in the order of the entries, in its stored dtype) and its checksum."""
        if self._file is None:
            return
        entry = next(self._expected)
        if entry.name != name or entry.dtype != tensor.dtype:
            raise RuntimeError(f"node-local copy: got {name} ({tensor.dtype}), expected {entry.name} ({entry.dtype})")
        try:
            self._file.write(tensor_bytes(tensor))
        except OSError as e:
            self._fail(e)
            return
        self._crcs[name] = crc

    def commit(self) -> bool:
        """Put the copy in place (the version's run-directory files are complete) and drop the older ones
        beyond `KEEP`; False if this version has no copy (a write failed)."""
        if self._file is None:
            return False
        try:
            self._file.close()
            self._file = None
            (self._tmp / CHECKSUMS_FILE).write_text(json.dumps(self._crcs))
            os.rename(self._tmp, version_dir(self.root, self.version))
        except OSError as e:
            self._fail(e)
            return False
        prune(self.root, KEEP)
        return True

    def abort(self) -> None:
        """Drop a copy whose publication failed."""
        if self._file is not None:
            self._file.close()
            self._file = None
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _fail(self, error: OSError) -> None:
        log.warning("no node-local copy of policy version %d (%s); explorers on this node read the run "
                    "directory for it", self.version, error)
        self.abort()
