"""Task claims kept alive from a thread while the explorer's loop is blocked in one long call.

The loop sends heartbeats between calls into the engine, but a single generation call can outlast
`filesystem.lease_s` (long responses, a large batch on a slow engine); without a heartbeat the other
explorers would take the claimed tasks over and explore them a second time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from types import TracebackType

from rfthpc.store.claims import TaskClaims

log = logging.getLogger(__name__)


class ClaimsHeartbeat:
    """While in use (`with`), a daemon thread sends every claim set's heartbeat each `period_s`."""

    def __init__(self, claim_sets: Sequence[TaskClaims], period_s: float) -> None:
        self.claim_sets = list(claim_sets)
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rfthpc-claims-heartbeat", daemon=True)

    def __enter__(self) -> ClaimsHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            for claims in self.claim_sets:
                try:
                    claims.heartbeat()
                except Exception as e:  # noqa: BLE001 — the loop's own next heartbeat reports it
                    log.warning("heartbeat of taskset %s failed (%s); trying again in %.0f s",
                                claims.taskset, e, self.period_s)
