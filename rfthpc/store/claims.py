"""Task claims: explorers that share a taskset split its tasks, each task once per epoch, none lost.

State, one JSON file per taskset (`tasks/<taskset>/claims.json`), rewritten atomically under a
run-directory lock (`rfthpc.locks`; the lock kind is configurable):

- a cursor `(epoch, pos)` into the epoch's task order (`sequential`: 0..N-1; `shuffle`: a
  permutation seeded by `(seed, epoch)`, new each epoch), and `issued`, the number of tasks handed
  out fresh so far (each has a `serial`; `max_tasks` = total_steps x batch_size stops it);
- `outstanding`: claimed, not yet completed tasks with their owner and owner attempt;
- `returned`: tasks released by their owner or reclaimed from a dead one, handed out first;
- `owners`: each owner's attempt and last heartbeat;
- `failed` (tasks completed without a group) and `refill` (fresh tasks allowed beyond `max_tasks`).

Refill: a trainer that consumes a claim set says so in the store (`experiences/_reader/losses.json`,
written by `StoreReader.track_tasksets`), with how many of its groups it dropped as stale. The trainer's
`total_steps` is the contract, so every group it loses is replaced: `refill` = groups dropped + tasks
that failed, never decreasing (a trainer resumed from an older checkpoint reports fewer for a while),
and fresh tasks are handed out up to `max_tasks + refill`, still within `total_epochs`. A claim set no
trainer reports on (`mode: explore` alone) keeps the plain `max_tasks` budget.

Every write carries a `version`, one more than the state it changed, and is refused if the file no
longer holds that state when it is about to be replaced: a holder that stalled past the lock's
`stale_s` (a suspended job) and had its lock broken redoes its change on the newer state instead of
undoing the other explorer's update (only a stall between that check and the rename escapes it).

Where each metadata operation costs milliseconds (NFS, Lustre, GPFS) and many explorers share a
claim set, the lock is the bottleneck (`tools/sim_scale.py`). Two things cut the transactions an
explorer makes: `ahead` claims that many batches in one transaction and hands them out one batch at
a time from a local reserve (all of them are held, heartbeated and reclaimed like any claim), and
`complete(..., defer=True)` records completions locally and settles them in this process's next
transaction (a claim, a heartbeat or `close`). A deferred completion lost with its process only
means the task is explored again (the trainer trains one group per task, as after any crash between
commit and completion).

An owner is an explorer slot (`<explorer name>/<rank>`); an attempt is one process of it. A claim is
reclaimed when its owner's heartbeat is older than `lease_s`, or at once when a new attempt of the
same owner (a requeued array task) shows up. Heartbeats are wall-clock times written by the owner;
clock skew between nodes must stay well below `lease_s`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rfthpc.errors import ConfigError, UserError
from rfthpc.fsutil import make_dirs, read_json, write_bytes_atomic
from rfthpc.locks import DEFAULT_LOCK_KIND, LockKind, make_lock
from rfthpc.rundir import RunDir
from rfthpc.store.reader_files import read_losses
from rfthpc.store.schema import check_name

log = logging.getLogger(__name__)

SELECTORS = ("sequential", "shuffle")
CLAIMS_FILE = "claims.json"
LOCK_FILE = "claims.lock"
STATE_FORMAT = 1
# A transaction whose state changed under it is redone this many times before the lock is blamed.
_MAX_REDOS = 3


@dataclass(frozen=True)
class Claim:
    """One task handed to one explorer."""

    taskset: str
    epoch: int
    """0-based epoch of the taskset."""
    index: int
    """The task's index in the taskset."""
    serial: int
    """Order in which the task was first handed out over the run (0-based)."""
    position: int
    """Where the trainer is expected to consume its group, counted in groups from the start:
    `serial` minus the groups lost before it was handed out (dropped as stale, or tasks that gave
    none), so position // batch_size is the step it is explored for."""

    @property
    def key(self) -> str:
        """Its name in the claims state: `<epoch>:<index>`."""
        return f"{self.epoch}:{self.index}"


@dataclass(frozen=True)
class ClaimsStatus:
    """What a claim set's state says, read without its lock (the file is replaced atomically)."""

    taskset: str
    epoch: int
    total_epochs: int
    issued: int
    """Tasks handed out fresh so far."""
    completed: int
    failed: int
    """Completed tasks that gave no group (every attempt failed, or the prompt was skipped)."""
    outstanding: int
    returned: int
    reclaimed: int
    max_tasks: int | None
    """The plain budget, total_steps x batch_size (None: the tasksets' epochs only)."""
    refill: int
    """Fresh tasks allowed beyond `max_tasks` to replace groups the trainer lost."""

    @property
    def limit(self) -> int | None:
        """Fresh tasks that may be handed out in all (None: no limit but the epochs)."""
        return None if self.max_tasks is None else self.max_tasks + self.refill

    @property
    def data_left(self) -> bool:
        """Some task of some epoch has not been handed out fresh yet."""
        return self.epoch < self.total_epochs

    @property
    def finished(self) -> bool:
        """Nothing to hand out now and nothing claimed: every task within the budget is done. A
        trainer that loses groups raises the budget, so this can become False again."""
        fresh_left = self.data_left and (self.limit is None or self.issued < self.limit)
        return not fresh_left and not self.outstanding and not self.returned

    @property
    def exhausted(self) -> bool:
        """The data ran out: every task of every epoch was handed out and completed."""
        return not self.data_left and not self.outstanding and not self.returned


def _status(state: dict[str, Any], reported: int | None) -> ClaimsStatus:
    return ClaimsStatus(
        taskset=state["taskset"], epoch=state["epoch"], total_epochs=state["total_epochs"], issued=state["issued"],
        completed=state["completed"], failed=state.get("failed", 0), outstanding=len(state["outstanding"]),
        returned=len(state["returned"]), reclaimed=state["reclaimed"], max_tasks=state["max_tasks"],
        refill=_refill(state, reported),
    )


def _refill(state: dict[str, Any], reported: int | None) -> int:
    """Fresh tasks allowed beyond max_tasks: the groups a trainer reported lost plus the tasks that gave
    none, never less than before. `reported` None: no trainer consumes this claim set."""
    if reported is None:
        return state.get("refill", 0)
    return max(state.get("refill", 0), reported + state.get("failed", 0))


class _StateChanged(Exception):
    """The claims state was rewritten by another process during this one's transaction."""


def default_owner() -> str:
    """An owner name for a process outside an explorer array: `<host>-<pid>`."""
    return f"{socket.gethostname()}-{os.getpid()}"


class TaskClaims:
    """Claims on the tasks of one taskset, shared by every explorer of a run (joiners included)."""

    def __init__(
        self,
        run_dir: Path,
        taskset: str,
        num_tasks: int,
        total_epochs: int = 1,
        selector: str = "sequential",
        seed: int = 42,
        lease_s: float = 300.0,
        lock: LockKind = DEFAULT_LOCK_KIND,
        owner: str | None = None,
        max_tasks: int | None = None,
        lock_timeout_s: float = 120.0,
        lock_stale_s: float = 60.0,
        ahead: int = 1,
    ) -> None:
        check_name("taskset name", taskset)
        if num_tasks < 1:
            raise UserError(f"taskset {taskset!r} has {num_tasks} tasks; it needs at least one")
        if total_epochs < 1:
            raise ConfigError(f"total_epochs must be >= 1, got {total_epochs}")
        if selector not in SELECTORS:
            raise ConfigError(f"task selector {selector!r} is unknown; use one of {', '.join(SELECTORS)}")
        if max_tasks is not None and max_tasks < 1:
            raise ConfigError(f"total_steps x batch_size must be >= 1, got {max_tasks}")
        if lease_s <= 0:
            raise ConfigError(f"claim lease_s must be > 0, got {lease_s}")
        if ahead < 1:
            raise ConfigError(f"claim batches ahead must be >= 1, got {ahead}")
        self.taskset = taskset
        self.num_tasks = int(num_tasks)
        self.total_epochs = int(total_epochs)
        self.selector = selector
        self.seed = int(seed)
        self.max_tasks = max_tasks
        self.lease_s = float(lease_s)
        self.owner = owner or default_owner()
        self.attempt = f"{int(time.time()):x}-{secrets.token_hex(4)}"
        self.run_dir = Path(run_dir)
        self.dir = make_dirs(RunDir(run_dir).tasks / taskset)
        self.path = self.dir / CLAIMS_FILE
        self._lock = make_lock(self.dir / LOCK_FILE, lock, lock_timeout_s, lock_stale_s)
        # The explorer's heartbeat thread (rfthpc.explorer.heartbeat) transacts too.
        self._mutex = threading.Lock()
        self._orders: dict[int, np.ndarray] = {}
        self.ahead = int(ahead)
        self._reserve: list[Claim] = []
        """Claims held beyond the batch handed out (`ahead`), handed out first."""
        self._deferred: list[tuple[Claim, bool]] = []
        """Completions (claim, produced a group) waiting for this process's next transaction."""
        self._deferred_lock = threading.Lock()

    # ---- state ---------------------------------------------------------------------------------

    def _fresh_state(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "taskset": self.taskset,
            "num_tasks": self.num_tasks,
            "total_epochs": self.total_epochs,
            "selector": self.selector,
            "seed": self.seed,
            "max_tasks": self.max_tasks,
            "epoch": 0,
            "pos": 0,
            "issued": 0,
            "completed": 0,
            "failed": 0,
            "refill": 0,
            "reclaimed": 0,
            "outstanding": {},
            "returned": [],
            "owners": {},
        }

    def _load(self) -> dict[str, Any]:
        state = read_json(self.path)
        if state is None:
            return self._fresh_state()
        for key in ("num_tasks", "total_epochs", "selector", "seed", "max_tasks"):
            if state.get(key) != getattr(self, key):
                raise ConfigError(
                    f"taskset {self.taskset!r} in {self.path} was started with {key}={state.get(key)!r}, "
                    f"but this explorer has {key}={getattr(self, key)!r}; give every explorer of a "
                    "taskset the same settings, or use a new taskset name"
                )
        return state

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            if self.selector == "shuffle":
                order = np.random.default_rng([self.seed, epoch]).permutation(self.num_tasks)
            else:
                order = np.arange(self.num_tasks)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def _reclaim(self, state: dict[str, Any], now: float) -> None:
        """Return to the pool every claim of a dead owner (lease expired) or of an old attempt."""
        owners = state["owners"]
        for key, c in list(state["outstanding"].items()):
            info = owners.get(c["owner"], {})
            if info.get("attempt") != c["attempt"]:
                why = f"owner {c['owner']} restarted (attempt {c['attempt']} -> {info.get('attempt')})"
            elif now - info.get("heartbeat", 0.0) > self.lease_s:
                why = f"owner {c['owner']} sent no heartbeat for {now - info.get('heartbeat', 0.0):.0f} s"
            else:
                continue
            del state["outstanding"][key]
            state["returned"].append([c["epoch"], c["index"], c["serial"]])
            state["reclaimed"] += 1
            log.warning("taskset %s: reclaimed task %s (epoch %d, index %d): %s",
                        self.taskset, key, c["epoch"], c["index"], why)

    def _fresh_left(self, state: dict[str, Any]) -> bool:
        if self.max_tasks is not None and state["issued"] >= self.max_tasks + state["refill"]:
            return False
        return state["epoch"] < self.total_epochs

    def _reported_losses(self) -> int | None:
        """Groups of this claim set the trainer reports lost; None if no trainer consumes it."""
        losses = read_losses(RunDir(self.run_dir).experiences)
        return None if losses is None or self.taskset not in losses else losses[self.taskset]

    def _transact(self, change: Callable[[dict[str, Any], float], Any]) -> Any:
        """Apply `change` to the state under the lock, refreshing this owner's heartbeat. Redone on the
        newer state if another process wrote the state meanwhile (this holder's lock was broken)."""
        for _ in range(_MAX_REDOS + 1):
            try:
                with self._mutex, self._lock:
                    return self._transact_once(change)
            except _StateChanged as e:
                log.warning("taskset %s: %s while this process held the lock %s (stalled longer than its stale_s?); "
                            "the change is redone on the newer state", self.taskset, e, self._lock.path)
        raise ConfigError(
            f"taskset {self.taskset!r}: the claims state {self.path} was rewritten by another process during "
            f"{_MAX_REDOS + 1} transactions in a row: the lock kind {self._lock.kind!r} does not exclude the "
            "explorers on this filesystem; set filesystem.lock_type: link"
        )

    def _transact_once(self, change: Callable[[dict[str, Any], float], Any]) -> Any:
        state = self._load()
        version = state.get("version", 0)
        now = time.time()
        previous = state["owners"].get(self.owner)
        if previous is not None and previous["attempt"] != self.attempt:
            # A requeued array task replaces its dead predecessor; a live one means two explorers
            # share a name and would keep taking each other's claims.
            log.warning(
                "taskset %s: owner %s starts attempt %s; its previous attempt %s (last heartbeat %.0f s ago) "
                "is presumed dead and its claims are reclaimed. If it is alive, two explorers share the "
                "name: give each explorer array its own explorer.name",
                self.taskset, self.owner, self.attempt, previous["attempt"], now - previous["heartbeat"],
            )
        state["owners"][self.owner] = {"attempt": self.attempt, "heartbeat": now}
        refill = _refill(state, self._reported_losses())
        if refill > state.get("refill", 0):
            log.info("taskset %s: %d more fresh task(s) to replace groups the trainer dropped as stale or "
                     "tasks that gave none (%d in all beyond max_tasks=%s)", self.taskset,
                     refill - state.get("refill", 0), refill, self.max_tasks)
        state["refill"] = refill
        state.setdefault("failed", 0)
        self._reclaim(state, now)
        with self._deferred_lock:
            deferred = list(self._deferred)
        self._settle(state, deferred)
        result = change(state, now)
        state["version"] = version + 1
        write_bytes_atomic(self.path, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode(),
                           before_replace=lambda: self._check_version(version))
        if deferred:
            with self._deferred_lock:
                del self._deferred[:len(deferred)]
        return result

    def _check_version(self, expected: int) -> None:
        """Raise _StateChanged unless the state on disk is still at version `expected` (0: none yet)."""
        on_disk = read_json(self.path)
        found = 0 if on_disk is None else on_disk.get("version", 0)
        if found != expected:
            raise _StateChanged(f"the state went from version {expected} to {found}")

    # ---- operations ----------------------------------------------------------------------------

    def _claim_now(self, state: dict[str, Any], n: int) -> list[Claim]:
        claims: list[Claim] = []
        # Every group lost before a task is handed out moves its consumption one place earlier.
        lost = state["refill"]
        while len(claims) < n and state["returned"]:
            epoch, index, serial = state["returned"].pop(0)
            claims.append(Claim(self.taskset, epoch, index, serial, max(0, serial - lost)))
        while len(claims) < n and self._fresh_left(state):
            index = int(self._order(state["epoch"])[state["pos"]])
            serial = state["issued"]
            claims.append(Claim(self.taskset, state["epoch"], index, serial, max(0, serial - lost)))
            state["issued"] += 1
            state["pos"] += 1
            if state["pos"] == self.num_tasks:
                state["epoch"] += 1
                state["pos"] = 0
        for c in claims:
            state["outstanding"][c.key] = {
                "epoch": c.epoch, "index": c.index, "serial": c.serial,
                "owner": self.owner, "attempt": self.attempt,
            }
        return claims

    def claim(
        self,
        n: int,
        timeout_s: float | None = None,
        poll_s: float = 1.0,
        on_wait: Callable[[], None] | None = None,
    ) -> list[Claim]:
        """Claim up to `n` tasks: released or reclaimed ones first, then fresh ones in selector order.

        When none is free but others still hold claims (which may come back if their owner dies),
        waits, calling `on_wait()` every `poll_s` (e.g. to flush the experience writer), until some
        are free, everything is done, or `timeout_s` passes. So with `timeout_s=None`, [] means
        the taskset is finished: every task of every epoch (or `max_tasks`) completed.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._mutex:
                if len(self._reserve) >= n:
                    claims, self._reserve = self._reserve[:n], self._reserve[n:]
                    return claims
                want = n * self.ahead - len(self._reserve)
            fresh, finished = self._transact(lambda s, now, want=want: (self._claim_now(s, want), self._finished(s)))
            with self._mutex:
                self._reserve += fresh
                claims, self._reserve = self._reserve[:n], self._reserve[n:]
            if claims or finished or (deadline is not None and time.monotonic() >= deadline):
                return claims
            if on_wait is not None:
                on_wait()
            time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))

    def complete(self, claims: Iterable[Claim], produced_group: bool = True, defer: bool = False) -> list[Claim]:
        """Mark claims done; return those accepted. A claim this process no longer holds (its lease
        expired and another explorer took it) is refused and logged; the store's reader trains only one
        group of a task explored twice.
        `produced_group=False`: the tasks gave no group (failed or skipped); a trainer that consumes
        this claim set gets fresh tasks in their place.
        `defer=True`: no transaction now; the completions are settled in this process's next one (see
        the module docstring) and all are returned (a refusal is logged when they are settled)."""
        claims = list(claims)
        if defer:
            with self._deferred_lock:
                self._deferred += [(c, produced_group) for c in claims]
            return claims
        return self._transact(lambda state, now: self._settle(state, [(c, produced_group) for c in claims]))

    def _settle(self, state: dict[str, Any], done: list[tuple[Claim, bool]]) -> list[Claim]:
        """Complete `done` in `state`; return the claims this process still held."""
        accepted = []
        for c, produced_group in done:
            held = state["outstanding"].get(c.key)
            if held is not None and (held["owner"], held["attempt"]) == (self.owner, self.attempt):
                del state["outstanding"][c.key]
                state["completed"] += 1
                state["failed"] += 0 if produced_group else 1
                accepted.append(c)
            else:
                log.warning("taskset %s: task %s is no longer claimed by %s (lease expired?); another "
                            "explorer redoes it, and the trainer trains only one of the two groups",
                            self.taskset, c.key, self.owner)
        return accepted

    def release(self, claims: Iterable[Claim]) -> None:
        """Give claims back unexplored (e.g. on preemption) so another explorer takes them first."""
        claims = list(claims)

        def change(state: dict[str, Any], now: float) -> None:
            for c in claims:
                held = state["outstanding"].get(c.key)
                if held is not None and (held["owner"], held["attempt"]) == (self.owner, self.attempt):
                    del state["outstanding"][c.key]
                    state["returned"].append([c.epoch, c.index, c.serial])

        self._transact(change)

    def heartbeat(self) -> None:
        """Tell the others this process is alive, keeping its claims (call well within `lease_s`);
        deferred completions are settled on the way."""
        self._transact(lambda s, now: None)

    def close(self) -> None:
        """Settle deferred completions and give the reserve back (this process stops using the claim
        set); nothing to do if there is neither."""
        with self._mutex:
            reserve, self._reserve = self._reserve, []
        with self._deferred_lock:
            deferred = bool(self._deferred)
        if reserve:
            self.release(reserve)
        elif deferred:
            self.heartbeat()

    def _finished(self, state: dict[str, Any]) -> bool:
        return not self._fresh_left(state) and not state["outstanding"] and not state["returned"]

    @staticmethod
    def read_status(run_dir: Path, taskset: str, lost: int | None = None) -> ClaimsStatus | None:
        """The state of claim set `taskset` (None if no explorer has opened it yet), read without the
        lock. `lost`: groups of it the caller (the trainer) knows it lost, counted into the refill
        before any explorer has acted on them."""
        state = read_json(RunDir(run_dir).tasks / taskset / CLAIMS_FILE)
        if not isinstance(state, dict):
            return None
        losses = read_losses(RunDir(run_dir).experiences)
        reported = None if losses is None or taskset not in losses else losses[taskset]
        if lost is not None:
            reported = max(lost, reported or 0)
        return _status(state, reported)

    def status(self) -> ClaimsStatus:
        """The state of this claim set now (see `read_status`)."""
        return self.read_status(self.run_dir, self.taskset) or _status(self._fresh_state(), None)

    def progress(self) -> dict[str, Any]:
        """Counts of the taskset: epoch, issued, completed, failed, outstanding, returned, reclaimed,
        refill, finished, exhausted."""
        st = self.status()
        return {
            "epoch": st.epoch, "issued": st.issued, "completed": st.completed, "failed": st.failed,
            "outstanding": st.outstanding, "returned": st.returned, "reclaimed": st.reclaimed,
            "refill": st.refill, "finished": st.finished, "exhausted": st.exhausted,
        }

    @property
    def finished(self) -> bool:
        """True once every task within the budget is done (no fresh task left, none claimed or returned)."""
        return self.status().finished
