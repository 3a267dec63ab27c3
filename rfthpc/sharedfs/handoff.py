"""Hand-offs between roles through the run directory: doorbells, and the one way to wait on them.

A role that hands something over (the trainer publishing weights, an explorer committing a chunk)
rings the channel's doorbell: it appends an entry to the doorbell's journal (`rfthpc.sharedfs.
journal`), a file under a name no file had before. A role that waits for the hand-off looks for the
next entry's name (a single metadata operation, cheap on NFS, Lustre and GPFS alike) instead of
listing the directories the hand-off lands in, and runs its own, costlier check only when the
doorbell rang, or at the slow interval in case a ring was missed. A new name is seen by every other
client of a network filesystem at once, where a file changed under its old name is seen a cache
period late (GlusterFS: 1 s; NFS: its attribute cache), so a ring on one node wakes a waiter on
another within milliseconds.

Polling adapts: for `due_s` after it starts waiting, or after a ring that did not yet satisfy it
(the hand-off is due), a waiter looks every `fast_s`; then, while nothing happens, the interval
grows by `growth` up to `slow_s`. A waiter that stays idle therefore costs about
`len(bells) / slow_s` metadata operations and `1 / slow_s` checks a second, however long it waits
(at the slow interval it lists each doorbell's directory instead of looking for one name, to catch
up with rings it may have missed while stalled); one that expects a hand-off notices it within tens
of milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from rfthpc.sharedfs.journal import journal_at

T = TypeVar("T")

Signature = int
"""A doorbell's newest ring (0: never rung)."""
RINGS_KEPT = 256
"""Rings a doorbell keeps behind its newest (empty files): how far a waiter may fall behind between
two looks and still find the next ring by name."""


class Doorbell:
    """The journal a producer appends an entry to on every hand-off of one channel."""

    def __init__(self, path: Path, keep: int = RINGS_KEPT) -> None:
        self.path = Path(path)
        self.journal = journal_at(self.path, keep=keep)

    def ring(self, note: bytes = b"") -> None:
        """Tell waiters that something was handed over; `note` may say what (a waiter that reads it
        need not list the directories the hand-off landed in). No fsync: a ring lost in a crash only
        delays a waiter to its slow interval."""
        self.journal.append(note, durable=False)

    def notes_after(self, n: int) -> tuple[int, list[bytes]]:
        """(the newest ring, the notes of the rings after ring `n`); rings already removed (a waiter
        that fell far behind) are left out: whoever reads notes must look for the rest itself."""
        newest = self.journal.newest()
        first = max(n + 1, newest - self.journal.keep + 1)
        notes = [note for i in range(first, newest + 1) if (note := self.journal.read(i)) is not None]
        return newest, notes

    def signature(self, rescan: bool = False) -> Signature:
        """The newest ring: one stat when nothing rang; `rescan` lists the directory instead."""
        return self.journal.scan() if rescan else self.journal.newest()


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
    """Looks at doorbells (metadata operations on the shared filesystem)."""
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
                slow = now - last_check >= p.slow_s
                current = self._signatures(bells, rescan=slow)
                rang = current != signatures
                if rang or slow:
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

    def _signatures(self, bells: Sequence[Doorbell], rescan: bool = False) -> list[Signature]:
        self.stats.stats += len(bells)
        return [b.signature(rescan) for b in bells]
