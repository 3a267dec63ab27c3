"""Locks on the small shared mutable files of a run (task claims, jobs.jsonl), of a configurable kind.

Which kind excludes across nodes depends on the filesystem (see docs/store.md, "Lock kinds"):

- `link` (default): a private marker file hard-linked onto the lock's name, the method open(2)
  documents for NFS (link is atomic on NFS, Lustre and GPFS; a lost reply is settled by the link
  count). Three metadata operations to acquire, two to release, one stat per waiter poll, so it
  holds up where each costs milliseconds (`tools/sim_scale.py`). A dead holder's marker is broken
  by a waiter.
- `strict-soft`: filelock.StrictSoftFileLock, ordered hard-link claims (first come, first served);
  excludes across NFS clients and Lustre and GPFS nodes, at about 40 metadata operations an
  acquisition. A dead holder's claim is broken by a waiter.
- `soft`: filelock.SoftFileLock, an O_CREAT|O_EXCL marker; excludes across nodes but starves under
  load. A dead holder's marker is broken by a waiter.
- `flock`: fcntl.flock (filelock.UnixFileLock); node-local on GPFS, Lustre `localflock` and NFS
  mounted `local_lock=flock|all` or `nolock` (Linux's NFS client otherwise takes it as a POSIX lock
  at the server), so for single-node runs there. The kernel releases a dead holder's lock.
- `lockf`: fcntl.lockf (POSIX record locks); coherent on GPFS and on NFS with a lock manager. The
  kernel (or lock manager) releases a dead holder's lock.

Waiters poll with exponential backoff and full jitter (5 ms up to 200 ms), so many waiters neither
synchronise nor load the metadata server with more than a few stats a second each.

A waiter breaks a link, soft or strict-soft lock whose holder is provably dead (same host, process gone) at once,
and one whose marker has not changed for `stale_s` seconds of the waiter's own monotonic clock (so clock
skew between hosts cannot expire a live holder), watched afresh after the waiter itself stalled (a
filesystem outage that froze both is no sign that the holder died). Holders must therefore finish
within `stale_s`, which the claim operations (milliseconds) do by far; a holder that stalled longer
(a suspended job) finds its claims write refused and redoes it (`rfthpc.tasks.claims`). Every break is
logged as a warning naming the holder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import random
import secrets
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Literal, Self, get_args

import filelock

from rfthpc.errors import ConfigError
from rfthpc.sharedfs.fileops import TMP_PREFIX, apply_mode, file_mode, make_dirs

LockKind = Literal["link", "strict-soft", "soft", "flock", "lockf"]
LOCK_KINDS: tuple[str, ...] = get_args(LockKind)
DEFAULT_LOCK_KIND: LockKind = "link"

log = logging.getLogger(__name__)

# Waiters poll from 5 ms (claim operations hold the lock for milliseconds) backing off to 200 ms,
# each pause drawn at random below the current bound (full jitter).
_POLL_MIN_S = 0.005
_POLL_MAX_S = 0.2
# A gap this long between two of a waiter's own polls means the waiter itself was stalled.
_OWN_STALL_S = 5.0


class LockTimeout(TimeoutError):
    """A run-directory lock was not acquired within its timeout (a live holder kept it)."""


def check_lock_kind(kind: str) -> LockKind:
    """Return `kind` if it names a lock kind, else raise a ConfigError that lists the kinds."""
    if kind not in LOCK_KINDS:
        raise ConfigError(
            f"lock kind {kind!r} is unknown; use one of {', '.join(LOCK_KINDS)} "
            f"({DEFAULT_LOCK_KIND} is safe on every shared filesystem)"
        )
    return kind  # type: ignore[return-value]


def process_gone(pid: int) -> bool:
    """True if no live process has `pid` on this host (a zombie counts as gone: it holds nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


class RunLock:
    """An exclusive (not reentrant) lock on `path`; use as `with make_lock(...):`."""

    def __init__(self, path: Path, kind: LockKind, timeout_s: float, stale_s: float) -> None:
        self.path = Path(path)
        self.kind = check_lock_kind(kind)
        self.timeout_s = float(timeout_s)
        self.stale_s = float(stale_s)
        make_dirs(self.path.parent)
        self._lockf_fd: int | None = None
        self._filelock: filelock.BaseFileLock | None = None
        self._link_ino: int | None = None
        """The inode of this holder's marker (kind link), to release only its own."""
        self._link_holders: dict[tuple[int, int], tuple[int, str]] = {}
        """(inode, mtime) of markers seen -> (pid, host) read from them (kind link)."""
        if kind == "strict-soft":
            self._filelock = filelock.StrictSoftFileLock(self.path, timeout=0)
        elif kind == "soft":
            self._filelock = filelock.SoftFileLock(self.path, timeout=0)
        elif kind == "flock":
            # fallback_to_soft=False: on a filesystem without flock (Lustre `noflock`) fail loudly
            # instead of silently becoming a different kind of lock.
            self._filelock = filelock.UnixFileLock(self.path, timeout=0, fallback_to_soft=False)
        self._first_seen: dict[object, float] = {}

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def acquire(self) -> None:
        """Wait up to `timeout_s` for the lock, breaking a dead holder's lock on the way."""
        deadline = time.monotonic() + self.timeout_s
        self._first_seen.clear()
        delay = _POLL_MIN_S
        last_poll = time.monotonic()
        while True:
            if self._try_acquire():
                return
            now = time.monotonic()
            if now - last_poll > _OWN_STALL_S:
                # This waiter stalled itself (a hung NFS mount, a suspended job): a holder that stalled
                # with it looked unchanged without being dead; watch it afresh.
                self._first_seen.clear()
            last_poll = now
            if now >= deadline:
                raise LockTimeout(
                    f"lock {self.path} ({self.kind}) not acquired within {self.timeout_s:.0f} s: "
                    f"{self._describe_holder()}; if that process is dead on an unreachable host, wait "
                    f"{self.stale_s:.0f} s (stale_s) for it to be broken, or remove the lock by hand"
                )
            self._recover_stale()
            time.sleep(random.uniform(_POLL_MIN_S, delay))
            delay = min(2 * delay, _POLL_MAX_S)

    def release(self) -> None:
        """Release the lock."""
        if self.kind == "link":
            self._release_link()
        elif self._filelock is not None:
            self._filelock.release()
        elif self._lockf_fd is not None:
            fcntl.lockf(self._lockf_fd, fcntl.LOCK_UN)
            os.close(self._lockf_fd)
            self._lockf_fd = None

    def _try_acquire(self) -> bool:
        if self.kind == "link":
            return self._try_link()
        if self.kind == "lockf":
            return self._try_lockf()
        assert self._filelock is not None
        if self.kind == "soft":
            self._log_dead_soft_holder()
        try:
            self._filelock.acquire(timeout=0)
        except filelock.Timeout:
            return False
        except OSError as e:
            if e.errno in (errno.ENOSYS, errno.EOPNOTSUPP):
                raise ConfigError(
                    f"lock kind {self.kind!r} is not supported by the filesystem of {self.path} "
                    f"({e.strerror}); use {DEFAULT_LOCK_KIND!r}"
                ) from None
            raise
        if self.kind == "flock":
            self._share_lock_file()
        return True

    def _try_link(self) -> bool:
        """One attempt: a held lock costs one stat; a free one, creating a private marker (pid and
        host in it), linking it onto the lock's name and removing the private name."""
        try:
            os.stat(self.path)
            return False
        except FileNotFoundError:
            pass
        private = self.path.with_name(f"{TMP_PREFIX}{self.path.name}.{socket.gethostname()}.{os.getpid()}."
                                      f"{secrets.token_hex(4)}")
        fd = os.open(private, os.O_CREAT | os.O_EXCL | os.O_WRONLY, file_mode())
        try:
            os.write(fd, f"{os.getpid()}\n{socket.gethostname()}\n".encode())
            ino = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        try:
            try:
                os.link(private, self.path)
            except FileExistsError:
                return False
            except OSError:
                # On NFS the reply of a link that was done can be lost: the marker's link count says.
                if os.stat(private).st_nlink != 2:
                    return False
            self._link_ino = ino
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(private)

    def _release_link(self) -> None:
        """Remove the lock's name if it is still this holder's marker (a stalled holder's lock may
        have been broken and taken by another process meanwhile: that one's is left alone)."""
        ino, self._link_ino = self._link_ino, None
        try:
            if os.stat(self.path).st_ino != ino:
                log.warning("lock %s was broken while this process held it (stalled longer than stale_s?) and "
                            "is another process's now; leaving it", self.path)
                return
            os.unlink(self.path)
        except FileNotFoundError:
            log.warning("lock %s was broken while this process held it (stalled longer than stale_s?)", self.path)

    def _link_holder(self) -> tuple[os.stat_result, int, str] | None:
        """The marker under the lock's name, with its pid and host (read once per marker)."""
        try:
            st = os.lstat(self.path)
            key = (st.st_ino, st.st_mtime_ns)
            if key not in self._link_holders:
                with open(self.path) as f:
                    lines = f.read().splitlines()
                self._link_holders[key] = (int(lines[0]), lines[1])
            return st, *self._link_holders[key]
        except (OSError, ValueError, IndexError):
            return None

    def _recover_link(self) -> None:
        holder = self._link_holder()
        if holder is None:
            return
        st, pid, host = holder
        if host == socket.gethostname() and process_gone(pid):
            reason = "which has exited"
        elif (age := self._stale(("link", st.st_ino, st.st_mtime_ns))) is not None:
            reason = f"unchanged for {age:.0f} s (stale_s={self.stale_s:.0f})"
        else:
            return
        # Moved aside first, so that of two waiters breaking it at once, only one removes it; a marker
        # that turns out to be another (a fresh holder's) goes back unless a third took the lock.
        aside = self.path.with_name(f"{TMP_PREFIX}{self.path.name}.broken.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        try:
            if os.lstat(aside).st_ino == st.st_ino:
                log.warning("breaking lock %s: marker of pid %d on host %s, %s", self.path, pid, host, reason)
            else:
                with contextlib.suppress(FileExistsError):
                    os.link(aside, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(aside)

    def _share_lock_file(self) -> None:
        """Give a lock file that stays in place the run's mode, so a shared run's group can open it too
        (only its creator can change the mode; for anyone else it already has it)."""
        with contextlib.suppress(OSError):
            apply_mode(self.path, is_dir=False)

    def _try_lockf(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except PermissionError as e:
            raise ConfigError(
                f"lock file {self.path} cannot be opened for writing ({e.strerror}); a run shared by several "
                "users needs filesystem.share_group set when it is created"
            ) from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EACCES, errno.EAGAIN):
                return False
            if e.errno in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP):
                raise ConfigError(
                    f"lock kind 'lockf' is not supported by the filesystem of {self.path} "
                    f"({e.strerror}); use {DEFAULT_LOCK_KIND!r}"
                ) from None
            raise
        self._lockf_fd = fd
        self._share_lock_file()
        return True

    def _stale(self, key: object) -> float | None:
        """Seconds `key` has been seen unchanged by this waiter if that exceeds stale_s, else None."""
        now = time.monotonic()
        first = self._first_seen.setdefault(key, now)
        return now - first if now - first >= self.stale_s else None

    def _recover_stale(self) -> None:
        if self.kind == "link":
            self._recover_link()
        elif self.kind == "strict-soft":
            self._recover_strict()
        elif self.kind == "soft":
            self._recover_soft()

    def _recover_strict(self) -> None:
        assert isinstance(self._filelock, filelock.StrictSoftFileLock)
        claims = self._filelock.claims
        for token in {c.token for c in claims}:
            mine = [c for c in claims if c.token == token]
            holder = mine[0]
            if holder.hostname == socket.gethostname() and process_gone(holder.pid):
                reason = "which has exited"
            elif (age := self._stale(("strict", token))) is not None:
                reason = f"unchanged for {age:.0f} s (stale_s={self.stale_s:.0f})"
            else:
                continue
            log.warning(
                "breaking lock %s: claim of pid %d on host %s, %s",
                self.path, holder.pid, holder.hostname, reason,
            )
            for claim in mine:
                with contextlib.suppress(FileNotFoundError):
                    self._filelock.force_break(claim.name)

    def _read_soft_marker(self) -> tuple[int, str, os.stat_result] | None:
        try:
            st = os.lstat(self.path)
            with open(self.path) as f:
                lines = f.read().splitlines()
            return int(lines[0]), lines[1], st
        except (OSError, ValueError, IndexError):
            return None

    def _log_dead_soft_holder(self) -> None:
        # filelock removes a marker whose same-host owner exited by itself; say so in the log.
        marker = self._read_soft_marker()
        if marker is not None:
            pid, host, _ = marker
            if host == socket.gethostname() and process_gone(pid):
                log.warning("breaking lock %s: marker of pid %d on host %s, which has exited", self.path, pid, host)

    def _recover_soft(self) -> None:
        marker = self._read_soft_marker()
        if marker is None:
            return
        pid, host, st = marker
        age = self._stale(("soft", st.st_ino, st.st_mtime_ns, pid, host))
        if age is None:
            return
        try:
            now = os.lstat(self.path)
        except FileNotFoundError:
            return
        if (now.st_ino, now.st_mtime_ns) != (st.st_ino, st.st_mtime_ns):
            return
        log.warning(
            "breaking lock %s: marker of pid %d on host %s unchanged for %.0f s (stale_s=%.0f)",
            self.path, pid, host, age, self.stale_s,
        )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _describe_holder(self) -> str:
        if isinstance(self._filelock, filelock.StrictSoftFileLock):
            held = [c for c in self._filelock.claims if c.state == "held"]
            if held:
                return f"held by pid {held[0].pid} on host {held[0].hostname}"
        elif self.kind == "soft" and (marker := self._read_soft_marker()) is not None:
            return f"held by pid {marker[0]} on host {marker[1]}"
        elif self.kind == "link" and (holder := self._link_holder()) is not None:
            return f"held by pid {holder[1]} on host {holder[2]}"
        return "held by another process"


def make_lock(
    path: Path,
    kind: LockKind = DEFAULT_LOCK_KIND,
    timeout_s: float = 120.0,
    stale_s: float = 60.0,
) -> RunLock:
    """A lock on `path` of the given kind (see the module docstring); use as a context manager.

    `timeout_s`: how long `with` waits before raising LockTimeout. `stale_s`: how long a link, soft or
    strict-soft marker may stay unchanged, as seen by a waiter, before the waiter breaks it.
    """
    return RunLock(path, kind, timeout_s, stale_s)
