"""Hand-offs between roles through the run directory: doorbells, and the one way to wait on them.

A role that hands something over (the trainer publishing weights, an explorer committing a chunk)
rings the channel's doorbell: it replaces one small file, so the file's inode, size or
modification time changes. A role that waits for the hand-off stats that one file (a single
metadata operation, cheap on NFS, Lustre and GPFS alike) instead of listing the directories the
hand-off lands in, and runs its own, costlier check only when the doorbell changed, or at the slow
interval in case a ring was missed (a producer of an older version, a file cache that hid it).

Polling adapts: for `due_s` after it starts waiting, or after a ring that did not yet satisfy it
(the hand-off is due), a waiter looks every `fast_s`; then, while nothing happens, the interval
grows by `growth` up to `slow_s`. A waiter that stays idle therefore costs about
`len(bells) / slow_s` stats and `1 / slow_s` checks a second, however long it waits; one that
expects a hand-off notices it within tens of milliseconds on a local filesystem, and within the
attribute-cache time on NFS (repeated stats of an unchanged file are answered from the client's
cache on NFS and Lustre, so the fast phase does not load the metadata server either).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from rfthpc.sharedfs.fileops import make_dirs, temporary_name

T = TypeVar("T")

Signature = tuple[int, int, int] | None


class Doorbell:
    """The small file a producer replaces on every hand-off of one channel."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def ring(self) -> None:
        """Tell waiters that something was handed over (replaces the file; no fsync: a ring lost in a
        crash only delays a waiter to its slow interval)."""
        make_dirs(self.path.parent)
        tmp = temporary_name(self.path)
        tmp.write_text(f"{time.time_ns()}\n")
        os.replace(tmp, self.path)

    def signature(self) -> Signature:
        """What changes on every ring: (inode, size, mtime in ns); None while it was never rung."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns


@dataclass(frozen=True)
class WaitPolicy:
    """How fast a waiter looks at its doorbells (seconds)."""

    fast_s: float = 0.02
    """Interval while a hand-off is due."""
    due_s: float = 2.0
    """How long a hand-off counts as due after the wait starts or after a ring that did not satisfy it."""
    slow_s: float = 1.0
    """Longest interval, reached while nothing happens; the check runs at least this often."""
    growth: float = 1.5
    """Factor by which the interval grows while nothing happens."""


@dataclass
class WaitStats:
    """What waiting cost one role, summed over its waits."""

    waits: int = 0
    waited_s: float = 0.0
    stats: int = 0
    """Doorbell stats (metadata operations on the shared filesystem)."""
    checks: int = 0
    """Calls of the waiter's own check."""


@dataclass
class Waiter:
    """Waits for hand-offs on doorbells; the clock and sleep are parameters so tests need no real time."""

    policy: WaitPolicy = field(default_factory=WaitPolicy)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    stats: WaitStats = field(default_factory=WaitStats)

    def wait(self, check: Callable[[], T | None], bells: Sequence[Doorbell], timeout_s: float | None,
             stop: Callable[[], bool] | None = None) -> T | None:
        """`check()`'s first truthy result, looked for now and after each ring of `bells` (or at the
        slow interval); None after `timeout_s` seconds (None: no limit) or once `stop()` is true."""
        p = self.policy
        start = self.clock()
        self.stats.waits += 1
        try:
            self.stats.checks += 1
            result = check()
            if result:
                return result
            signatures = self._signatures(bells)
            interval = p.fast_s
            last_check = due_since = start
            while True:
                now = self.clock()
                if (timeout_s is not None and now - start >= timeout_s) or (stop is not None and stop()):
                    return None
                pause = interval if timeout_s is None else min(interval, max(0.0, start + timeout_s - now))
                self.sleep(pause)
                now = self.clock()
                current = self._signatures(bells)
                rang = current != signatures
                if rang or now - last_check >= p.slow_s:
                    signatures, last_check = current, now
                    self.stats.checks += 1
                    result = check()
                    if result:
                        return result
                if rang:
                    due_since = now
                interval = p.fast_s if now - due_since < p.due_s else min(interval * p.growth, p.slow_s)
        finally:
            self.stats.waited_s += self.clock() - start

    def _signatures(self, bells: Sequence[Doorbell]) -> list[Signature]:
        self.stats.stats += len(bells)
        return [b.signature() for b in bells]
