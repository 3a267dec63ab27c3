"""SIGTERM and SIGUSR2 (Slurm's preemption and time-limit warning) become a request to stop.

The handler only records the request; the role's loop checks it between units of work and stops
cleanly (the trainer writes a checkpoint; an explorer commits its finished groups and releases the
claims it has not finished), then exits with `EXIT_PREEMPTED` (124) so the launcher requeues it.
A second signal does not interrupt that.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)


class StopRequest:
    """Records the first stop request; install it in the main thread for the role's lifetime."""

    def __init__(self, then: str = "finishing in-flight work, then exiting for requeue") -> None:
        """`then`: what the role does once asked to stop (for the log line)."""
        self.reason: str | None = None
        self.then = then
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """True once a stop signal arrived (or `request` was called)."""
        return self.reason is not None

    def request(self, reason: str) -> None:
        """Ask the loop to stop (what the signal handler does); the first reason is kept."""
        if self.reason is None:
            self.reason = reason
            log.warning("stop requested (%s): %s", reason, self.then)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)

    def install(self) -> StopRequest:
        """Route SIGTERM and SIGUSR2 to this request (only possible in the main thread; elsewhere a no-op)."""
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        """Put back the handlers that were there before `install`."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
