"""SIGTERM and SIGUSR2 (Slurm's preemption and time-limit warning) become a request to stop.

The handler only records the request; the role's loop checks it between units of work and stops
cleanly (the trainer writes a checkpoint; an explorer commits its finished groups and releases the
claims it has not finished), then exits with `EXIT_PREEMPTED` (124) so the launcher requeues it.
A second signal does not interrupt that.

`exit_process` ends a role once everything it writes is closed, without Python's interpreter
finalization.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, NoReturn

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


def exit_process(code: int) -> NoReturn:
    """End this role's process with `code` once everything it writes is closed, skipping Python's
    interpreter finalization.

    The trainer: gloo's worker threads outlive `destroy_process_group` (the DTensor sharding caches
    keep the device mesh, and with it the group, alive), and one that drops a finished collective's
    tensor while the interpreter finalizes needs the GIL, is killed instead and aborts the process:
    a rank that trained and saved everything would end with SIGABRT, its torchrun and Slurm job
    FAILED (pytorch/pytorch#179291). An explorer: finalizing vLLM's and torch's thousands of
    modules and threads took 2 s after the last group was committed. Only the standard streams and
    log handlers are left to flush.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
