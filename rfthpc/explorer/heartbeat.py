"""The explorer's one heartbeat: a thread that tells the run directory the process is alive.

Every `period_s` (a quarter of `filesystem.lease_s`), for the explorer's whole life, it renews the
leases of the task claims the explorer holds (or others take those tasks over), the reader file
that keeps the trainer from deleting the weights the engine holds, and the progress record (a
record older than its lease tells `rfthpc status` the process is gone). A thread, not the loop,
so that a long call into the engine (a weight load, a generation longer than the lease) renews
nothing late.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Self

from rfthpc.rundir.explorer_meta import Progress
from rfthpc.tasks.claims import ClaimSet, TaskClaims
from rfthpc.weights.follow import WeightFollower

log = logging.getLogger(__name__)


class Heartbeat:
    """While in use (`with`), a daemon thread renews claims, the weights reader file and progress."""

    def __init__(self, period_s: float, claim_sets: Callable[[], Sequence[ClaimSet | TaskClaims]], follower: WeightFollower,
                 progress: Progress) -> None:
        """`claim_sets()`: the claim sets the explorer holds now (they change with the stage)."""
        self.period_s = period_s
        self.claim_sets = claim_sets
        self.follower = follower
        self.progress = progress
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rfthpc-heartbeat", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.beat()

    def beat(self) -> None:
        """Renew everything once; a failed renewal is a warning and is tried again next period."""
        renewals: list[tuple[str, Callable[[], None]]] = [
            *((f"the claims of taskset {c.taskset}", c.heartbeat) for c in self.claim_sets()),
            ("the weights reader file", self.follower.refresh_lease),
            ("the progress record", self.progress.touch),
        ]
        for what, renew in renewals:
            try:
                renew()
            except Exception as e:  # noqa: BLE001 — a shared filesystem hiccup; the next beat retries
                log.warning("heartbeat: renewing %s failed (%s); trying again in %.0f s", what, e, self.period_s)
        self.beats += 1
