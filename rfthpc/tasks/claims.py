"""Task claims: explorers that share a taskset split its tasks, each task once per epoch, none lost.

State, one JSON document per taskset, each version a new entry of the journal `tasks/<taskset>/claims/`
(`rfthpc.sharedfs.journal`), written under a run-directory lock (`rfthpc.sharedfs.locks`; the lock
kind is configurable):

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

Each transaction reads the newest entry, n, and writes its change as entry n + 1 only: if another
process wrote n + 1 first, the write is refused (a link onto a taken name fails on every client of
every filesystem) and the change is redone on the newer state. So no update is ever lost, even
where the lock does not exclude (a holder that stalled past the lock's `stale_s` and had its lock
broken, a lock kind that is node-local on the filesystem) and even where a client's cache shows an
older state: entries are new names, which other nodes see at once, where a file replaced under its
name would reach them a cache period late (GlusterFS: 1 s; NFS: its attribute cache).

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
from rfthpc.rundir.lost_groups import read_losses
from rfthpc.rundir.paths import RunDir, check_name
from rfthpc.sharedfs.fileops import make_dirs, write_once
from rfthpc.sharedfs.journal import EntryTaken, Journal, journal_at
from rfthpc.sharedfs.locks import DEFAULT_LOCK_KIND, LockKind, make_lock

log = logging.getLogger(__name__)

SELECTORS = ("sequential", "shuffle")
CLAIMS_DIR = "claims"
STATES_KEPT = 8
"""Versions of a shard's state left behind the newest."""
SHARDS_FILE = "shards"
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
    shard: int = 0
    """The claims shard that handed it out (see `ClaimSet`)."""

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
    shards: tuple[ClaimsStatus, ...] = ()
    """Each shard's own status when the claim set is sharded (the fields above are their sums)."""

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
        if self.shards:
            return all(s.finished for s in self.shards)
        fresh_left = self.data_left and (self.limit is None or self.issued < self.limit)
        return not fresh_left and not self.outstanding and not self.returned

    @property
    def exhausted(self) -> bool:
        """The data ran out: every task of every epoch was handed out and completed."""
        if self.shards:
            return all(s.exhausted for s in self.shards)
        return not self.data_left and not self.outstanding and not self.returned

    @property
    def free(self) -> bool:
        """A claim now would get a task (one was given back, or a fresh one is left)."""
        fresh_left = self.data_left and (self.limit is None or self.issued < self.limit)
        return bool(self.returned) or fresh_left


def _share(total: int, shard: int, shards: int) -> int:
    """How many of positions 0..total-1 fall to `shard` when position p goes to shard p % shards."""
    return max(0, (total - shard + shards - 1) // shards)


def _status(state: dict[str, Any], reported: int | None) -> ClaimsStatus:
    """One shard's status (`reported`: the trainer's losses of the whole claim set)."""
    shard, shards = state.get("shard", 0), state.get("shards", 1)
    max_tasks = state["max_tasks"]
    return ClaimsStatus(
        taskset=state["taskset"], epoch=state["epoch"], total_epochs=state["total_epochs"], issued=state["issued"],
        completed=state["completed"], failed=state.get("failed", 0), outstanding=len(state["outstanding"]),
        returned=len(state["returned"]), reclaimed=state["reclaimed"],
        max_tasks=None if max_tasks is None else _share(max_tasks, shard, shards),
        refill=_refill(state, None if reported is None else _share(reported, shard, shards)),
    )


def _combined(parts: list[ClaimsStatus]) -> ClaimsStatus:
    """The status of a sharded claim set: sums of its shards', each shard's kept for `finished`."""
    if len(parts) == 1:
        return parts[0]
    limits = [p.max_tasks for p in parts]
    return ClaimsStatus(
        taskset=parts[0].taskset, epoch=min(p.epoch for p in parts), total_epochs=parts[0].total_epochs,
        issued=sum(p.issued for p in parts), completed=sum(p.completed for p in parts),
        failed=sum(p.failed for p in parts), outstanding=sum(p.outstanding for p in parts),
        returned=sum(p.returned for p in parts), reclaimed=sum(p.reclaimed for p in parts),
        max_tasks=None if None in limits else sum(limits), refill=sum(p.refill for p in parts), shards=tuple(parts),
    )


def _refill(state: dict[str, Any], reported: int | None) -> int:
    """Fresh tasks allowed beyond max_tasks: the groups a trainer reported lost plus the tasks that gave
    none, never less than before. `reported` None: no trainer consumes this claim set."""
    if reported is None:
        return state.get("refill", 0)
    return max(state.get("refill", 0), reported + state.get("failed", 0))


def shard_file(name: str, shard: int) -> str:
    """The name of shard `shard`'s `name`: `name` itself for shard 0, then the shard number before the
    extension (`claims.lock`, `claims.1.lock`, ...) or after a name without one (`claims`, `claims.1`, ...)."""
    if shard == 0:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}.{shard}.{ext}" if dot else f"{name}.{shard}"


def shard_journal(run_dir: Path, taskset: str, shard: int) -> Journal:
    """The journal of shard `shard`'s states of claim set `taskset`."""
    return journal_at(RunDir(run_dir).tasks / taskset / shard_file(CLAIMS_DIR, shard), keep=STATES_KEPT)


def read_state(journal: Journal) -> tuple[int, dict[str, Any] | None]:
    """(version, state) of a shard's newest state; (0, None) before any explorer wrote one."""
    n, data = journal.latest()
    try:
        state = None if data is None else json.loads(data)
    except ValueError:
        raise ConfigError(f"{journal.entry(n)} is not a claims state (not JSON); restore it or use a new "
                          "taskset name") from None
    return n, state if isinstance(state, dict) else None


class ShardCountDiffers(ConfigError):
    """The claim set on disk is split into another number of shards than this process assumed."""

    def __init__(self, found: int, message: str) -> None:
        super().__init__(message)
        self.found = found


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
        shard: int = 0,
        shards: int = 1,
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
        if not 0 <= shard < shards:
            raise ConfigError(f"claims shard {shard} of {shards}: use 0 <= shard < shards")
        self.shard, self.shards = int(shard), int(shards)
        self.local_tasks = _share(int(num_tasks), self.shard, self.shards)
        """Tasks of each epoch this shard hands out (positions p of the epoch order with p % shards == shard)."""
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
        self.journal = shard_journal(self.run_dir, taskset, self.shard)
        self.path = self.journal.path
        self._lock = make_lock(self.dir / shard_file(LOCK_FILE, self.shard), lock, lock_timeout_s, lock_stale_s)
        # The explorer's heartbeat thread (rfthpc.explorer.heartbeat) transacts too.
        self._mutex = threading.Lock()
        self._orders: dict[int, np.ndarray] = {}
        self._epoch_seen = 0
        """The epoch the state was at in this process's last transaction."""
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
            "shard": self.shard,
            "shards": self.shards,
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

    def _load(self) -> tuple[int, dict[str, Any]]:
        """(version, state) of the newest state, checked against this process's settings."""
        version, state = read_state(self.journal)
        if state is None:
            return version, self._fresh_state()
        if state.get("shards", 1) != self.shards:
            raise ShardCountDiffers(int(state.get("shards", 1)),
                                    f"claim set {self.taskset!r} in {self.dir} is split into {state.get('shards', 1)} "
                                    f"shards, this process expected {self.shards}")
        for key in ("num_tasks", "total_epochs", "selector", "seed", "max_tasks"):
            if state.get(key) != getattr(self, key):
                raise ConfigError(
                    f"taskset {self.taskset!r} in {self.path} was started with {key}={state.get(key)!r}, "
                    f"but this explorer has {key}={getattr(self, key)!r}; give every explorer of a "
                    "taskset the same settings, or use a new taskset name"
                )
        return version, state

    def _task_index(self, epoch: int, pos: int) -> int:
        """The task at this shard's position `pos` of `epoch`'s order."""
        if self.selector == "sequential":
            return self.shard + pos * self.shards
        return int(self._shuffled(epoch)[pos])

    def _shuffled(self, epoch: int) -> np.ndarray:
        """This shard's part of `epoch`'s permutation (computed once per epoch and process; `claim`
        computes it before taking the lock, since for millions of tasks it takes a while)."""
        if epoch not in self._orders:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_tasks)
            # A copy, so the whole permutation is not kept alive by a strided view of it.
            self._orders = {epoch: order[self.shard::self.shards].copy()}
        return self._orders[epoch]

    def _lapsed(self, state: dict[str, Any], c: dict[str, Any], now: float) -> str | None:
        """Why outstanding claim `c` is to be reclaimed (its owner restarted, or its lease expired), or None."""
        info = state["owners"].get(c["owner"], {})
        if info.get("attempt") != c["attempt"]:
            return f"owner {c['owner']} restarted (attempt {c['attempt']} -> {info.get('attempt')})"
        if now - info.get("heartbeat", 0.0) > self.lease_s:
            return f"owner {c['owner']} sent no heartbeat for {now - info.get('heartbeat', 0.0):.0f} s"
        return None

    def reclaimable(self, state: dict[str, Any], now: float) -> bool:
        """Whether a transaction on `state` would take back some claim of a dead owner."""
        return any(self._lapsed(state, c, now) for c in state["outstanding"].values())

    def _reclaim(self, state: dict[str, Any], now: float) -> None:
        """Return to the pool every claim of a dead owner (lease expired) or of an old attempt."""
        for key, c in list(state["outstanding"].items()):
            why = self._lapsed(state, c, now)
            if why is None:
                continue
            del state["outstanding"][key]
            state["returned"].append([c["epoch"], c["index"], c["serial"]])
            state["reclaimed"] += 1
            log.warning("taskset %s: reclaimed task %s (epoch %d, index %d): %s",
                        self.taskset, key, c["epoch"], c["index"], why)

    def _fresh_left(self, state: dict[str, Any]) -> bool:
        if self.local_tasks == 0:
            return False
        if self.max_tasks is not None and \
                state["issued"] >= _share(self.max_tasks, self.shard, self.shards) + state["refill"]:
            return False
        return state["epoch"] < self.total_epochs

    def _reported_losses(self) -> int | None:
        """This shard's share of the groups of the claim set the trainer reports lost; None if no
        trainer consumes it."""
        losses = read_losses(RunDir(self.run_dir).experiences)
        if losses is None or self.taskset not in losses:
            return None
        return _share(losses[self.taskset], self.shard, self.shards)

    def _transact(self, change: Callable[[dict[str, Any], float], Any]) -> Any:
        """Apply `change` to the state under the lock, refreshing this owner's heartbeat. Redone on the
        newer state if another process wrote the state meanwhile (this holder's lock was broken)."""
        for _ in range(_MAX_REDOS + 1):
            try:
                with self._mutex, self._lock:
                    return self._transact_once(change)
            except EntryTaken as e:
                log.warning("taskset %s: %s while this process held the lock %s (stalled longer than its stale_s, "
                            "or a lock kind that does not exclude across nodes?); the change is redone on the "
                            "newer state", self.taskset, e, self._lock.path)
        raise ConfigError(
            f"taskset {self.taskset!r}: the claims state {self.path} was rewritten by another process during "
            f"{_MAX_REDOS + 1} transactions in a row: the lock kind {self._lock.kind!r} does not exclude the "
            "explorers on this filesystem; set filesystem.lock_type: link"
        )

    def _transact_once(self, change: Callable[[dict[str, Any], float], Any]) -> Any:
        version, state = self._load()
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
        self._epoch_seen = state["epoch"]
        state.pop("version", None)  # the entry's number is the version
        self.journal.append((json.dumps(state, indent=2, sort_keys=True) + "\n").encode(), expect=version + 1)
        if deferred:
            with self._deferred_lock:
                del self._deferred[:len(deferred)]
        return result

    # ---- operations ----------------------------------------------------------------------------

    def _claim_now(self, state: dict[str, Any], n: int) -> list[Claim]:
        claims: list[Claim] = []
        # Every group lost before a task is handed out moves its consumption one place earlier
        # (a shard's refill is its share of the claim set's losses).
        lost = state["refill"] * self.shards
        while len(claims) < n and state["returned"]:
            epoch, index, serial = state["returned"].pop(0)
            claims.append(Claim(self.taskset, epoch, index, serial, max(0, serial - lost), self.shard))
        while len(claims) < n and self._fresh_left(state):
            index = self._task_index(state["epoch"], state["pos"])
            # Serials interleave the shards as their tasks interleave in the epoch order.
            serial = state["issued"] * self.shards + self.shard
            claims.append(Claim(self.taskset, state["epoch"], index, serial, max(0, serial - lost), self.shard))
            state["issued"] += 1
            state["pos"] += 1
            if state["pos"] == self.local_tasks:
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
            if self.selector == "shuffle" and self._epoch_seen < self.total_epochs:
                self._shuffled(self._epoch_seen)
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

    @property
    def has_reserve(self) -> bool:
        """Whether this process holds claims claimed ahead and not yet handed out."""
        with self._mutex:
            return bool(self._reserve)

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
        """The state of claim set `taskset`, all its shards (None if no explorer has opened it yet),
        read without the lock. `lost`: groups of it the caller (the trainer) knows it lost, counted
        into the refill before any explorer has acted on them."""
        directory = RunDir(run_dir).tasks / taskset
        try:
            count = int((directory / SHARDS_FILE).read_text())
        except (FileNotFoundError, ValueError):
            count = 1
        states = [read_state(shard_journal(run_dir, taskset, s))[1] for s in range(count)]
        opened = [s for s in states if isinstance(s, dict)]
        if not opened:
            return None
        losses = read_losses(RunDir(run_dir).experiences)
        reported = None if losses is None or taskset not in losses else losses[taskset]
        if lost is not None:
            reported = max(lost, reported or 0)
        parts = []
        for shard, state in enumerate(states):
            if not isinstance(state, dict):
                # Not opened yet: all of its share is still to hand out.
                state = {**opened[0], "shard": shard, "epoch": 0, "pos": 0, "issued": 0, "completed": 0,
                         "failed": 0, "refill": 0, "reclaimed": 0, "outstanding": {}, "returned": []}
            parts.append(_status(state, reported))
        return _combined(parts)

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


def _shard_count(directory: Path, wanted: int) -> int:
    """The claim set's shard count: the one recorded in `directory/shards` when it was created (or 1
    for a claim set of an older rfthpc), else `wanted`, recorded now. The record is linked into
    place, never replaced, so of explorers starting together all use the first one's count."""
    record = directory / SHARDS_FILE
    for _ in range(2):
        try:
            return int(record.read_text())
        except FileNotFoundError:
            pass
        except ValueError:
            raise ConfigError(f"{record} does not hold a shard count; restore it or use a new taskset name") from None
        count = 1 if (directory / CLAIMS_DIR).exists() else wanted
        write_once(record, f"{count}\n".encode())
    return int(record.read_text())


class ClaimSet:
    """The claims of one claim set as an explorer uses them, split over `shards` independent files.

    Position p of every epoch's task order belongs to shard p % shards: each shard is a `TaskClaims`
    with its own file and lock, its share of the budget and of the refill, and serials that
    interleave as its tasks do. An explorer claims from its home shard (its rank modulo the number
    of shards) and, when that has nothing free, from the others in turn (looking at their files
    without the lock first), so many explorers spread over many locks instead of queueing on one.
    The number of shards is fixed when the claim set is created (the `shards` file beside them);
    explorers that join later use it whatever they were configured with. One shard is exactly the
    single claims file of a `TaskClaims`.
    """

    def __init__(self, run_dir: Path, taskset: str, num_tasks: int, *, shards: int = 1, home: int = 0,
                 **options: Any) -> None:
        if shards < 1:
            raise ConfigError(f"claim shards must be >= 1, got {shards}")
        self.run_dir, self.taskset, self.num_tasks, self._options = Path(run_dir), taskset, num_tasks, options
        self._build(_shard_count(make_dirs(RunDir(run_dir).tasks / taskset), shards), home)
        self._touched: set[int] = set()

    def _build(self, count: int, home: int) -> None:
        self._shards = [TaskClaims(self.run_dir, self.taskset, self.num_tasks, shard=s, shards=count, **self._options)
                        for s in range(count)]
        self.home = home % count

    @property
    def shards(self) -> int:
        """How many shards the claim set has."""
        return len(self._shards)

    def _worth_a_claim(self, shard: int) -> bool:
        """Whether a claim on shard `shard` would get a task, from its file read without the lock: this
        process holds a reserve there, a task is given back or fresh, or a dead owner's claims are due to
        be reclaimed (only a transaction takes them back, so a shard whose explorers all died must still
        be visited by the others)."""
        t = self._shards[shard]
        if t.has_reserve:
            return True
        _, state = read_state(t.journal)
        if state is None:
            return t.local_tasks > 0
        return _status(state, t._reported_losses()).free or t.reclaimable(state, time.time())

    def claim(self, n: int, timeout_s: float | None = None, poll_s: float = 1.0,
              on_wait: Callable[[], None] | None = None) -> list[Claim]:
        """Claim up to `n` tasks (see `TaskClaims.claim`): from the home shard, else from another
        with tasks free; [] with `timeout_s=None` means every shard is finished."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        order = [(self.home + i) % self.shards for i in range(self.shards)]
        while True:
            # Shards where this process holds a reserve first, so its claims are used before their lease runs out.
            for s in sorted(order, key=lambda s: not self._shards[s].has_reserve):
                if s != self.home and not self._worth_a_claim(s):
                    continue
                self._touched.add(s)
                got = self._shards[s].claim(n, timeout_s=0)
                if got:
                    return got
            if self.finished or (deadline is not None and time.monotonic() >= deadline):
                return []
            if on_wait is not None:
                on_wait()
            time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))

    def complete(self, claims: Iterable[Claim], produced_group: bool = True, defer: bool = False) -> list[Claim]:
        """`TaskClaims.complete` on each claim's shard."""
        accepted: list[Claim] = []
        for s, part in self._by_shard(claims).items():
            accepted += self._shards[s].complete(part, produced_group, defer)
        return accepted

    def release(self, claims: Iterable[Claim]) -> None:
        """`TaskClaims.release` on each claim's shard."""
        for s, part in self._by_shard(claims).items():
            self._shards[s].release(part)

    def heartbeat(self) -> None:
        """Keep this process's claims in every shard it took claims from."""
        for s in sorted(self._touched or {self.home}):
            self._shards[s].heartbeat()

    def close(self) -> None:
        """`TaskClaims.close` on every shard this process took claims from."""
        for s in sorted(self._touched):
            self._shards[s].close()

    def _by_shard(self, claims: Iterable[Claim]) -> dict[int, list[Claim]]:
        parts: dict[int, list[Claim]] = {}
        for c in claims:
            parts.setdefault(c.shard, []).append(c)
            self._touched.add(c.shard)
        return parts

    def status(self) -> ClaimsStatus:
        """The state of the whole claim set (`TaskClaims.read_status`)."""
        return self._shards[0].status()

    def progress(self) -> dict[str, Any]:
        """Counts of the whole claim set (`TaskClaims.progress`)."""
        return self._shards[0].progress()

    @property
    def finished(self) -> bool:
        """True once every shard is finished."""
        return self.status().finished
