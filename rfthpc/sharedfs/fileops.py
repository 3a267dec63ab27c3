"""Safe file operations on a shared filesystem (Lustre, GPFS, NFS).

Every file that another process reads is written under a temporary name in the same directory,
flushed, fsynced and published with `os.replace`, so a reader sees the old file or the new one,
never a torn one. Temporary names start with `.tmp-` so every reader can skip them.
Files and directories are private to the user unless the run shares them with a Unix group.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TMP_PREFIX = ".tmp-"
_ESTALE_TRIES = 3

_share_gid: int | None = None


def set_share_group(group: str | None) -> None:
    """Make files created from now on group-readable/writable by `group` (None: private to the user)."""
    global _share_gid
    if group is None:
        _share_gid = None
        return
    try:
        _share_gid = grp.getgrnam(group).gr_gid
    except KeyError:
        from rfthpc.errors import ConfigError

        raise ConfigError(
            f"filesystem.share_group: Unix group {group!r} does not exist on this machine; "
            "name a group you belong to (see `id -Gn`) or leave it unset to keep the run private"
        ) from None


def file_mode() -> int:
    """The mode of new files under the run's permission policy (private, or its share group)."""
    return 0o660 if _share_gid is not None else 0o600


def _dir_mode() -> int:
    # setgid on shared directories keeps new entries in the share group.
    return 0o2770 if _share_gid is not None else 0o700


def apply_mode(path: Path, is_dir: bool) -> None:
    """Set the run's permission policy (private or shared group) on one path."""
    os.chmod(path, _dir_mode() if is_dir else file_mode())
    if _share_gid is not None:
        os.chown(path, -1, _share_gid)


def is_temporary(name: str) -> bool:
    """True for names that writers use before publishing; readers must ignore them."""
    return name.startswith(TMP_PREFIX)


def temporary_name(final: Path) -> Path:
    """A unique temporary sibling of `final` (same directory, so `os.replace` is atomic)."""
    tag = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return final.with_name(f"{TMP_PREFIX}{final.name}.{tag}")


def make_dirs(path: Path) -> Path:
    """Create `path` and missing parents with the run's permission policy; return it."""
    path = Path(path)
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir()
            apply_mode(d, is_dir=True)
    return path


def fsync_dir(path: Path) -> None:
    """Flush a directory entry change (a rename) to stable storage where the filesystem allows."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # Some network filesystems refuse fsync on directories; the rename is still atomic.
    finally:
        os.close(fd)


_SYNC_FILE_RANGE_WRITE = 2
_sync_file_range: Any = None


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing bytes [offset, offset + length) of `fd` to stable storage, without waiting.

    A hint (Linux `sync_file_range`, a no-op elsewhere) that lets the disk work while a writer
    copies in the rest of a large file, so its final fsync, which durability still relies on,
    waits for little more than the last part.
    """
    global _sync_file_range
    if _sync_file_range is None:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            _sync_file_range = fn
        except (OSError, AttributeError):
            _sync_file_range = False
    if _sync_file_range:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


@contextlib.contextmanager
def atomic_path(final: Path, before_replace: Callable[[], None] | None = None) -> Iterator[Path]:
    """Yield a temporary path to write; on success fsync it and `os.replace` it onto `final`.

    `before_replace` is called between the fsync and the replace (the last moment to refuse the
    write by raising). On an exception the temporary file is removed and `final` is untouched.
    """
    final = Path(final)
    make_dirs(final.parent)
    tmp = temporary_name(final)
    try:
        yield tmp
        if tmp.is_file():
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            apply_mode(tmp, is_dir=False)
    except BaseException:
        _discard(tmp)
        raise
    _put_in_place(tmp, final, before_replace)


def _discard(tmp: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


def _put_in_place(tmp: Path, final: Path, before_replace: Callable[[], None] | None) -> None:
    """Rename the written and fsynced `tmp` onto `final` (after `before_replace`, which may refuse by
    raising) and fsync the directory; `tmp` is removed if that fails."""
    try:
        if before_replace is not None:
            before_replace()
        os.replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        _discard(tmp)
        raise


def write_bytes_atomic(path: Path, data: bytes, before_replace: Callable[[], None] | None = None) -> None:
    """Publish `data` at `path` atomically: a temporary sibling is created with the run's mode,
    written and fsynced through one descriptor, then renamed onto `path` (and the directory fsynced).

    Three metadata operations by path (create, rename, the directory's open), since on NFS, Lustre
    and GPFS each costs milliseconds and the small files of a run (claims, heartbeats, reader files)
    are rewritten often. `before_replace` as in `atomic_path`.
    """
    path = Path(path)
    tmp = temporary_name(path)
    write_new_file(tmp, data)
    _put_in_place(tmp, path, before_replace)


def write_new_file(path: Path, data: bytes, durable: bool = True) -> None:
    """Create `path`, which must not exist, with the run's mode and write `data` through one
    descriptor (fsynced if `durable`); nothing is left behind if that fails."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(path, flags, file_mode())
    except FileNotFoundError:
        make_dirs(path.parent)
        fd = os.open(path, flags, file_mode())
    try:
        try:
            if _share_gid is not None:
                # The umask may have taken the group's write bit; a shared run's files need it.
                os.fchmod(fd, file_mode())
                os.fchown(fd, -1, _share_gid)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _discard(path)
        raise


def link_once(tmp: Path, name: Path) -> bool:
    """Link the complete file `tmp` onto `name`; False if the name is taken. A name made this way is
    never replaced, so no reader on another node can hold a stale copy of it. On NFS the reply of a
    link that was done can be lost: the temporary file's link count then says whether it was."""
    try:
        os.link(tmp, name)
        return True
    except FileExistsError:
        return False
    except OSError:
        if os.stat(tmp).st_nlink == 2:
            return True
        raise


def write_once(path: Path, data: bytes) -> bool:
    """Create `path` holding `data` unless it exists: of processes racing to create it (on any node)
    exactly one does, and every reader sees either no file or the whole of the winner's. True if
    this call created it."""
    path = Path(path)
    tmp = temporary_name(path)
    write_new_file(tmp, data)
    try:
        created = link_once(tmp, path)
        if created:
            fsync_dir(path.parent)
        return created
    finally:
        _discard(tmp)


def write_text_atomic(path: Path, text: str) -> None:
    """Publish `text` at `path` atomically."""
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, obj: Any) -> None:
    """Publish `obj` as indented JSON at `path` atomically."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: Path, default: Any = None) -> Any:
    """Read a JSON file; return `default` if it does not exist (it may vanish on NFS).

    A file another node replaced may answer ESTALE (this client still holds the old one's handle):
    it is opened again, and read as missing if that keeps happening."""
    for _ in range(_ESTALE_TRIES):
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return default
        except OSError as e:
            if e.errno != errno.ESTALE:
                raise
    return default


def append_line(path: Path, line: str) -> None:
    """Append one line with a single `write` (O_APPEND); callers that share the file hold a lock."""
    make_dirs(Path(path).parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, file_mode())
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
