"""Following the trainer's published policies (`rfthpc.weights`: `weights/latest`, `weights/step_<N>/`).

A step directory counts only once its `STABLE` marker exists; `latest` naming an incomplete
directory is ignored until the marker appears. Before loading version N the explorer names it in
its reader file (`weights/.readers/<explorer>-<rank>.json`), so the trainer's clean-up keeps that
directory while the file is fresh; the explorer's heartbeat thread renews the file while it uses the
version (`refresh_lease`).
"""

from __future__ import annotations

import logging
import threading
import time

from rfthpc import weights
from rfthpc.engines.base import PolicyEngine
from rfthpc.rundir import RunDir

log = logging.getLogger(__name__)


class WeightFollower:
    """Keeps an engine on the newest complete published policy, and its reader file fresh."""

    def __init__(self, run: RunDir, explorer: str, rank: int) -> None:
        self.run = run
        self.explorer = explorer
        self.rank = rank
        self.engine: PolicyEngine | None = None
        self.version = 0
        self.last_load_s = 0.0
        self.loads = 0
        self._named: int | None = None
        """The version the reader file names (the heartbeat thread renews exactly that)."""
        self._lease_lock = threading.Lock()
        self._ignored: int | None = None

    def newest_complete(self) -> int | None:
        """The version `weights/latest` names if its directory is complete, else None."""
        latest = weights.read_latest(self.run.root)
        if latest is None:
            return None
        if not weights.is_complete(self.run.weights_step(latest)):
            if self._ignored != latest:
                log.info("weights/step_%d has no %s marker yet; ignoring it until it is complete",
                         latest, weights.STABLE)
                self._ignored = latest
            return None
        return latest

    def start_point(self, initial_model: str) -> tuple[int, str]:
        """The version and directory to build the engine from, already named in the reader file:
        the newest complete published version, else the initial model as version 0."""
        while True:
            newest = self.newest_complete()
            if newest is None:
                self.write_lease(0)
                return 0, initial_model
            self.write_lease(newest)
            # Named only now: the trainer may have removed it in between (it reads the reader files
            # before it removes STABLE); a newer one is complete then.
            if weights.is_complete(self.run.weights_step(newest)):
                return newest, str(self.run.weights_step(newest))

    def attach(self, engine: PolicyEngine, version: int) -> None:
        """Follow with `engine`, which holds `version` now."""
        self.engine = engine
        self.version = version
        self.write_lease(version)

    def write_lease(self, version: int) -> None:
        """Name `version` in this process's reader file (now)."""
        with self._lease_lock:
            weights.record_reader(self.run.root, self.explorer, self.rank, version)
            self._named = version

    def refresh_lease(self) -> None:
        """Rewrite the reader file with the version it names (the heartbeat; nothing before the first name)."""
        with self._lease_lock:
            if self._named is not None:
                weights.record_reader(self.run.root, self.explorer, self.rank, self._named)

    def update(self) -> bool:
        """Load the newest complete version if it is newer than the one held; True if loaded."""
        newest = self.newest_complete()
        if newest is None or newest <= self.version:
            return False
        step_dir = self.run.weights_step(newest)
        self.write_lease(newest)
        if not weights.is_complete(step_dir):
            # Removed between the check and the lease: keep the old weights, try again next poll.
            log.warning("weights/step_%d vanished before it was loaded; keeping version %d", newest, self.version)
            self.write_lease(self.version)
            return False
        assert self.engine is not None, "attach() an engine first"
        start = time.perf_counter()
        self.engine.load_weights(step_dir)
        self.last_load_s = time.perf_counter() - start
        self.loads += 1
        log.info("loaded policy version %d (weights/step_%d) in %.2f s", newest, newest, self.last_load_s)
        self.version = newest
        return True

    def close(self) -> None:
        """Drop the reader file: this process needs no published weights any more."""
        with self._lease_lock:
            self._named = None
            weights.clear_reader(self.run.root, self.explorer, self.rank)
