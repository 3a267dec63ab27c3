"""Atomic small-file writes: the run's file mode, a refused write leaves nothing behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rfthpc.sharedfs import fileops as fsutil


def test_atomic_writes_get_the_runs_mode_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        fsutil.write_json_atomic(tmp_path / "new" / "dir" / "private.json", {"a": 1})
        fsutil.set_share_group(fsutil.grp.getgrgid(os.getgid()).gr_name)
        try:
            fsutil.write_text_atomic(tmp_path / "shared.txt", "x\n")
        finally:
            fsutil.set_share_group(None)
    finally:
        os.umask(old)
    assert fsutil.read_json(tmp_path / "new" / "dir" / "private.json") == {"a": 1}
    assert stat.S_IMODE((tmp_path / "new" / "dir" / "private.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "shared.txt").stat().st_mode) == 0o660   # the umask took no group bit
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "shared.txt"]


def test_a_refused_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    fsutil.write_bytes_atomic(path, b"old")

    def refuse() -> None:
        raise RuntimeError("changed meanwhile")

    with pytest.raises(RuntimeError, match="changed meanwhile"):
        fsutil.write_bytes_atomic(path, b"new", before_replace=refuse)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_write_once_creates_a_file_once_and_never_replaces_it(tmp_path: Path) -> None:
    """The first writer's content stays; later writers are told they lost; no temporary file is left."""
    target = tmp_path / "marker.json"
    assert fsutil.write_once(target, b"first\n") is True
    assert fsutil.write_once(target, b"second\n") is False
    assert target.read_bytes() == b"first\n"
    assert os.listdir(tmp_path) == ["marker.json"]
    assert stat.S_IMODE(target.stat().st_mode) == fsutil.file_mode()
