"""A journal: numbered entries, each written once under a name no file had before.

    <dir>/000000000001, 000000000002, ...   the entries, oldest first (a few bytes each)
    <dir>/.tmp-...                          an entry being written (never read)

Everything one role hands to another on a different node goes through one. On a network filesystem
each node is a client with caches of its own: a new name reaches another client at once, but a
file changed or replaced under its old name is seen a cache period late (GlusterFS with default
options: 0.4 ms against 1 s; NFS: its attribute cache, 3 to 60 s by default), and reading it there
may give the old contents, or ESTALE. So nothing another node waits for is changed in place: each
new state or signal is a new entry, and a reader that knows entry n looks for entry n + 1 (one
stat, which the server answers while the name does not exist yet).

An entry is written under a temporary name, then `os.link`ed onto its number. Linking onto a number
that is taken fails with EEXIST on every client of every filesystem (one winner of any race), so
`append(expect=n)` is a compare-and-swap: a writer that read entry n - 1 writes n only if nobody
else did meanwhile, whatever its caches showed it. Readers never see a partial entry.

Writers remove old entries every `keep` appends, all those at least `keep` behind the newest,
oldest first; what remains is a contiguous run ending at the newest, so a reader that finds its
last entry knows that each newer one exists. A reader that fell `keep` behind (its entry is gone)
lists the directory to catch up.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
from pathlib import Path

from rfthpc.sharedfs.fileops import is_temporary, link_once, temporary_name, write_new_file

NAME_WIDTH = 12
_NAME = re.compile(r"^\d{%d}$" % NAME_WIDTH)
_PROBES = 2
"""Entries looked for one by one before a reader lists the directory instead."""
_ESTALE_TRIES = 3


class EntryTaken(Exception):
    """`append(expect=n)`: entry n was written by another writer first."""


def entry_name(n: int) -> str:
    """The file name of entry `n`."""
    return f"{n:0{NAME_WIDTH}d}"


def journal_at(path: Path, keep: int = 16) -> Journal:
    """This process's `Journal` of `path` (one per directory, so what it saw carries over between calls)."""
    key = os.path.abspath(path)
    with _journals_lock:
        journal = _journals.get(key)
        if journal is None or journal.keep != max(1, keep):
            journal = _journals[key] = Journal(Path(key), keep)
        return journal


class Journal:
    """Numbered entries under `path` (a directory), each written once under a new name. Safe to share
    between the threads of a process (`journal_at`)."""

    def __init__(self, path: Path, keep: int = 16) -> None:
        """`keep`: entries left behind the newest when writers clean up (at least 1)."""
        self.path = Path(path)
        self.keep = max(1, keep)
        self._seen = 0
        """The newest entry this process knows of (0: none yet, or it must list to find it)."""
        self._lock = threading.Lock()

    def entry(self, n: int) -> Path:
        """The path of entry `n`."""
        return self.path / entry_name(n)

    def scan(self) -> int:
        """The newest entry, from a listing of the directory (0 if there is none)."""
        n = max(_numbers(self.path), default=0)
        with self._lock:
            self._seen = n
        return n

    def newest(self) -> int:
        """The newest entry (0 if there is none): the last one this process saw and each next one that
        exists now; one stat when nothing is new."""
        n = self._seen
        if n == 0:
            return self.scan()
        for _ in range(_PROBES):
            if not os.path.lexists(self.entry(n + 1)):
                self._saw(n)
                return n
            n += 1
        return self.scan()

    def _saw(self, n: int) -> None:
        with self._lock:
            self._seen = max(self._seen, n)

    def read(self, n: int) -> bytes | None:
        """Entry `n`'s contents; None if it does not exist (not written yet, or removed)."""
        for _ in range(_ESTALE_TRIES):
            try:
                with open(self.entry(n), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None
            except OSError as e:
                # A removed entry whose handle this client cached: look the name up again.
                if e.errno != errno.ESTALE:
                    raise
        return None

    def latest(self) -> tuple[int, bytes | None]:
        """(number, contents) of the newest entry; (0, None) if there is none."""
        n = self.newest()
        while n:
            data = self.read(n)
            if data is not None:
                return n, data
            # Removed since this process saw it (it fell `keep` behind): list to catch up.
            previous, n = n, self.scan()
            if n == previous:
                return 0, None
        return 0, None

    def append(self, data: bytes, expect: int | None = None, durable: bool = True) -> int:
        """Write `data` as the next entry; return its number.

        With `expect`, as entry `expect` only: EntryTaken if another writer wrote it first (read the
        newer state and try again). `durable`: fsync the entry and give it its name only once it is
        complete (a state others read and rely on after a crash); a mere signal (`durable=False`) is
        created under its name at once (one metadata operation), so a reader may find it still empty."""
        if not durable:
            n = self._create(data)
        else:
            tmp = temporary_name(self.path / "entry")
            write_new_file(tmp, data)
            try:
                n = expect if expect is not None else self.newest() + 1
                while not link_once(tmp, self.entry(n)):
                    if expect is not None:
                        with self._lock:
                            self._seen = 0  # what this process saw is out of date: list next time
                        raise EntryTaken(f"{self.entry(n)} was written by another process first")
                    n = self.newest() + 1
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        self._saw(n)
        if n % self.keep == 0:
            self._prune(n)
        return n

    def _create(self, data: bytes) -> int:
        """Create the next entry under its name (O_EXCL: one creator of each number) and write `data`."""
        n = self.newest() + 1
        while True:
            try:
                write_new_file(self.entry(n), data, durable=False)
                return n
            except FileExistsError:
                n = self.newest() + 1

    def _prune(self, newest: int) -> None:
        """Remove every entry at least `keep` behind `newest`, oldest first."""
        for old in sorted(n for n in _numbers(self.path) if n <= newest - self.keep):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.entry(old))


_journals: dict[str, Journal] = {}
_journals_lock = threading.Lock()


def _numbers(path: Path) -> list[int]:
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    return [int(n) for n in names if _NAME.match(n) and not is_temporary(n)]
