"""SIGTERM and SIGUSR2 (Slurm's preemption / time-limit warning) become a request to stop.

The handler only records the signal; the training loop checks the request between steps (and
while it waits for experience), saves a checkpoint and exits with `EXIT_PREEMPTED` (124) so the
launcher requeues the job. A second signal does not interrupt the checkpoint being written.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)


class StopRequest:
    """Remembers the first stop signal received while installed."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        """True once a stop signal arrived."""
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            log.warning("received %s: the trainer will checkpoint and stop after the current step",
                        signal.Signals(signum).name)

    def install(self) -> StopRequest:
        """Handle the stop signals from now on (only possible in the main thread; elsewhere a no-op)."""
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        """Put back the handlers that were there before `install`."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
