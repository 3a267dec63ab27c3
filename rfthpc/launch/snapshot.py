"""A copy of the rfthpc package taken at submit, so queued jobs are immune to later edits of the code.

Jobs put the snapshot first on PYTHONPATH. Snapshots are named by a hash of their content, so
submitting the same code again (add-explorers, resubmission) reuses the one already there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from pathlib import Path

import rfthpc
from rfthpc.sharedfs.fileops import TMP_PREFIX, apply_mode, make_dirs

_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def package_dir() -> Path:
    """The directory of the rfthpc package this process imported."""
    return Path(rfthpc.__file__).resolve().parent


def _files(root: Path) -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(_SKIP_SUFFIXES) and not name.startswith("."):
                files.append(Path(dirpath, name))
    return files


def code_hash(root: Path) -> str:
    """A hash of the package's files (names and contents)."""
    h = hashlib.sha256()
    for path in _files(root):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def snapshot_code(dest_root: Path, source: Path | None = None) -> Path:
    """Copy the rfthpc package to `dest_root/<hash>/rfthpc` (once) and return `dest_root/<hash>`.

    The returned directory is what jobs put on PYTHONPATH.
    """
    source = source or package_dir()
    digest = code_hash(source)
    final = Path(dest_root) / digest
    if (final / "rfthpc" / "__init__.py").is_file():
        return final
    make_dirs(Path(dest_root))
    tmp = Path(dest_root) / f"{TMP_PREFIX}{digest}-{uuid.uuid4().hex[:8]}"
    try:
        for path in _files(source):
            target = tmp / "rfthpc" / path.relative_to(source)
            make_dirs(target.parent)
            shutil.copyfile(path, target)
            apply_mode(target, is_dir=False)
        apply_mode(tmp, is_dir=True)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another submit created the same snapshot first; it has the same content.
            if not (final / "rfthpc" / "__init__.py").is_file():
                raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)
    return final
