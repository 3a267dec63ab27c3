"""Stop requests: SIGTERM and SIGUSR2 (Slurm's preemption and time-limit warning) end the explorer cleanly.

The handler only records the request; the explorer loop checks it between units of work, stops
serving generate calls, commits the groups that are finished, releases the claims that are not,
and exits with `EXIT_PREEMPTED` (124) so the launcher requeues it.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)


class StopRequest:
    """Records the first stop signal; install it in the main thread for the explorer's lifetime."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """True once a stop signal arrived (or `request` was called)."""
        return self.reason is not None

    def request(self, reason: str) -> None:
        """Ask the loop to stop (what the signal handler does)."""
        if self.reason is None:
            self.reason = reason
            log.warning("stop requested (%s): finishing in-flight work, then exiting for requeue", reason)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)

    def install(self) -> StopRequest:
        """Route SIGTERM and SIGUSR2 to this request (main thread only)."""
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        """Put the previous handlers back."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
