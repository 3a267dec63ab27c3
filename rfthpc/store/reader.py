"""The trainer's side of the store: take committed groups in commit order, each exactly once.

Consumption state is one cursor per stream (writer process): `(seq, done)` = every group of chunks
before `seq` and the first `done` groups of chunk `seq` are consumed. Streams commit chunks in
sequence order, so this small state names exactly the consumed groups; it is JSON, goes into the
trainer's checkpoint (`state`, a `ReaderState`), and a restarted trainer that loads it neither loses nor repeats
a group. A `take` is a transaction: the cursors move only when a full batch is returned.

A task's group can be committed twice: an explorer that commits it and is killed (or outlives its
claim lease) before it marks the task done leaves the task to be explored again. The reader keeps
the tasks it has taken, one bitmap of task indices per claim set and epoch (the explorer's
`group.info` `claims`, `epoch`, `index`), in the same state, and drops a second group of a task
taken (counted as `dropped_duplicate`): each task is trained once.

Groups dropped as stale are counted per claim set (the explorer's `group.info["claims"]`), and so
are the groups of a chunk that had to be quarantined (to the first claim set tracked: an unreadable
chunk no longer says which tasks they were). For the
claim sets the trainer consumes (`track_tasksets`) the counts are published in `_reader/losses.json`
as soon as a take walks past a drop, even one that does not complete a batch: the trainer may be
waiting for exactly those replacements (`TaskClaims` hands out a fresh task per lost group).

With replay (`replay`, a `ReplayPolicy`), "exactly once" becomes "at most as often as the policy
allows": every listed training group enters a replay buffer (rfthpc.algorithms.replay) as the cursors move past
it, and a take reads the ready groups of highest priority. The buffer, each entry with its read count,
priority and cooldown, is part of the same state, so a trainer resumed from a checkpoint reads a group
no more often, in all, than the steps it kept read it plus what the policy still allows. A group that
leaves the buffer before its first read (pushed out by the capacity, too stale, or its chunk
quarantined) is counted and lost like a stale one; garbage collection keeps the chunks the buffer
still points into.
"""

from __future__ import annotations

import heapq
import logging
import random
import sys
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field, replace
from pathlib import Path

from rfthpc.algorithms.replay import Entry, ReplayBuffer, ReplayPolicy, Slot
from rfthpc.rundir.lost_groups import write_losses
from rfthpc.sharedfs.handoff import Waiter, WaitPolicy
from rfthpc.store.chunks import ChunkCorrupt, read_chunk
from rfthpc.store.layout import ChunkRef, experience_doorbell, list_chunks, noted_chunk, open_store, quarantine
from rfthpc.store.reader_files import (
    COUNTERS,
    Cursor,
    ReaderProgress,
    ReaderState,
    write_checkpointed,
    write_reader_progress,
)
from rfthpc.store.schema import Group, TaskRef

log = logging.getLogger(__name__)

_STALL_WARN_S = 60.0
_PROGRESS_EVERY_S = 1.0
_POOL_CHUNKS_CACHED = 8
"""Chunks behind the cursors (read again for replay) kept in memory between takes."""


class StoreTimeout(TimeoutError):
    """Fewer groups than asked for were committed before the timeout (nothing was consumed)."""


@dataclass
class _Selection:
    """What one attempt at a batch picked, on copies of the consumption state (committed if complete)."""

    cursor: dict[str, Cursor]
    taken: dict[str, int]
    buffer: ReplayBuffer | None = None
    picked: list[Group] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    """How many times each picked group has been read, this read included."""
    delta: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)


class StoreReader:
    """The single consumer of a run's experience store (the trainer's rank 0)."""

    def __init__(self, run_dir: Path, max_staleness: int | None = None, poll_s: float = 0.1,
                 replay: ReplayPolicy | None = None) -> None:
        """`max_staleness`: drop (and count) groups with `current_version - policy_version` above it
        (None keeps all). `poll_s`: the longest a waiting `take` goes without listing the store; it looks
        again at once when an explorer rings the store's doorbell (rfthpc.sharedfs.handoff). `replay`: read
        through a replay buffer (rfthpc.algorithms.replay) instead of once each in commit order."""
        if max_staleness is not None and max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0 or None, got {max_staleness}")
        self.store = open_store(run_dir, create=True)
        self.max_staleness = max_staleness
        self.replay = replay
        self._buffer = ReplayBuffer()
        self._rng = random.Random()
        self._pool_refs: dict[tuple[str, int], ChunkRef] = {}
        """Chunks behind the cursors that hold replay buffer entries."""
        self._pool_cache: OrderedDict[tuple[str, int], list[Group]] = OrderedDict()
        self._missing_warned: set[tuple[str, int]] = set()
        self.doorbell = experience_doorbell(self.store)
        self._rings_read = 0
        """The newest ring of the doorbell whose note `_scan` read."""
        self.waiter = Waiter(WaitPolicy(slow_s=poll_s))
        self._cursor: dict[str, Cursor] = {}
        self._counters: Counter[str] = Counter()
        self._staleness_hist: Counter[int] = Counter()
        self._version_hist: Counter[int] = Counter()
        self._known: dict[str, dict[int, ChunkRef]] = {}
        self._seen_at: dict[tuple[str, int], int] = {}
        self._unreadable: set[tuple[str, int]] = set()
        self._cache: dict[tuple[str, int], list[Group]] = {}
        self._scans = 0
        self._blocked_since: dict[str, float] = {}
        self._warned_stall: set[str] = set()
        self.visible_latencies: deque[float] = deque(maxlen=10_000)
        """Seconds from a chunk's commit to this reader first listing it (live chunks only)."""
        self._last: dict[str, float] = {}
        self._progress_written = 0.0
        self._lost: Counter[str] = Counter()
        self._lost_pending: Counter[str] = Counter()
        self._taken: dict[str, int] = {}
        """`<claims>:<epoch>` -> bitmap of the task indices taken for training."""
        self._tracked: list[str] = []
        self._losses_written: dict[str, int] | None = None

    # ---- listing -------------------------------------------------------------------------------

    def _scan(self) -> None:
        """List the store and remember chunks not yet consumed, with when they were first seen."""
        now = time.time()
        self._scans += 1
        listed: set[tuple[str, int]] = set()
        pooled = {(slot.stream, slot.seq) for slot in self._buffer.entries}
        refs = list_chunks(self.store)
        rang = self.doorbell.signature()
        if self._scans == 1:
            self._rings_read = rang  # the first listing finds the backlog
        elif rang > self._rings_read:
            # Rings since the last scan: on another node the directories may list their chunks a
            # little after the rings arrive (GlusterFS: up to 50 ms). When the listing shows none of
            # them, read the chunks' names from the rings' notes instead of waiting.
            known = {(r.stream, r.seq) for refs_of in self._known.values() for r in refs_of.values()}
            if all((r.stream, r.seq) in known or r.seq < self._cursor.get(r.stream, Cursor()).seq for r in refs):
                self._rings_read, notes = self.doorbell.notes_after(self._rings_read)
                refs += [ref for note in notes if (ref := noted_chunk(self.store, note)) is not None]
            else:
                self._rings_read = rang
        for ref in refs:
            key = (ref.stream, ref.seq)
            listed.add(key)
            if ref.seq < self._cursor.get(ref.stream, Cursor()).seq:
                old = self._pool_refs.get(key)
                if key in pooled and (old is None or (ref.quarantined and not old.quarantined)):
                    self._pool_refs[key] = ref
                continue
            chunks = self._known.setdefault(ref.stream, {})
            old = chunks.get(ref.seq)
            if old is None or (ref.quarantined and not old.quarantined):
                chunks[ref.seq] = ref
            if key not in self._seen_at:
                self._seen_at[key] = self._scans
                # The first scan finds the backlog; only later ones measure commit -> visible.
                if self._scans > 1 and not ref.quarantined:
                    self.visible_latencies.append(max(0.0, now - ref.commit_ns / 1e9))
        self._watch_stalls(listed)

    def _watch_stalls(self, listed: set[tuple[str, int]]) -> None:
        """Warn once about a stream whose next chunk is missing while later ones exist (deleted by hand,
        or GC after the trainer was restored from an older checkpoint than the last one)."""
        now = time.monotonic()
        for stream, chunks in self._known.items():
            seq = self._cursor.get(stream, Cursor()).seq
            key = (stream, seq)
            if seq in chunks and key not in listed and key not in self._cache:
                del chunks[seq]  # vanished: forget it so the stall check below sees the gap
            if seq in chunks or not any(s > seq for s in chunks):
                self._blocked_since.pop(stream, None)
                continue
            since = self._blocked_since.setdefault(stream, now)
            if now - since > _STALL_WARN_S and stream not in self._warned_stall:
                self._warned_stall.add(stream)
                log.warning(
                    "experience stream %s: chunk %d is missing but later chunks exist; its groups wait "
                    "until it reappears (was it deleted by hand, or GC'd after the trainer resumed from "
                    "an older checkpoint than the last one it marked?)", stream, seq,
                )

    # ---- reading -------------------------------------------------------------------------------

    def _load(self, ref: ChunkRef) -> tuple[ChunkRef, list[Group]] | None:
        """A chunk's groups, with its ref (a quarantined ref and no groups if it is unreadable);
        None if the file vanished (NFS directory caches can list a file before it opens)."""
        key = (ref.stream, ref.seq)
        if ref.quarantined:
            return ref, []
        if key in self._cache:
            return ref, self._cache[key]
        try:
            attrs, groups = read_chunk(ref.path)
            if (attrs.get("stream"), attrs.get("seq"), len(groups)) != (ref.stream, ref.seq, ref.n_groups):
                raise ChunkCorrupt(
                    ref.path,
                    f"its name says stream {ref.stream} chunk {ref.seq} with {ref.n_groups} groups, its "
                    f"content says stream {attrs.get('stream')} chunk {attrs.get('seq')} with {len(groups)}",
                )
        except FileNotFoundError:
            return None
        except OSError as e:
            # A filesystem error (an evicted Lustre client, an NFS server failover) says nothing about
            # the file: its stream waits and the next poll reads it again.
            if key not in self._unreadable:
                log.warning("chunk %s could not be read (%s); its stream waits and it is read again at the next "
                            "poll", ref.path, e)
            self._unreadable.add(key)
            return None
        except ChunkCorrupt as e:
            dest = quarantine(self.store, ref, str(e))
            ref = ChunkRef(
                ref.explorer, ref.rank, ref.token, ref.seq, ref.commit_ns, ref.n_groups, dest, quarantined=True
            )
            self._known[ref.stream][ref.seq] = ref
            return ref, []
        self._unreadable.discard(key)
        self._cache[key] = groups
        return ref, groups

    def _order_key(self, ref: ChunkRef) -> tuple[int, int, str, int]:
        # Commit order across explorers: chunks listed earlier first, and within one listing by
        # commit time. A stream's own chunks are visited strictly in sequence (see _walk).
        return (self._seen_at.get((ref.stream, ref.seq), 0), ref.commit_ns, ref.stream, ref.seq)

    def _walk(self, limit: int | None, current_version: int, sel: _Selection) -> list[tuple[ChunkRef, int, Group]]:
        """Walk the unconsumed groups in commit order, moving `sel`'s copy of the cursors past them.

        Eval groups are skipped, second groups of a task taken and stale groups dropped (counted in
        `sel`); the others are returned with their chunk and position, at most `limit` (None: all
        listed), their tasks marked in `sel.taken`.
        """
        heap = []
        for stream, chunks in self._known.items():
            ref = chunks.get(sel.cursor.get(stream, Cursor()).seq)
            if ref is not None:
                heap.append((self._order_key(ref), ref))
        heapq.heapify(heap)
        accepted: list[tuple[ChunkRef, int, Group]] = []
        while heap and (limit is None or len(accepted) < limit):
            _, ref = heapq.heappop(heap)
            loaded = self._load(ref)
            if loaded is None:
                continue
            ref, groups = loaded
            seq, done = sel.cursor.get(ref.stream, Cursor())
            pos = done if seq == ref.seq else 0
            while pos < len(groups) and (limit is None or len(accepted) < limit):
                g = groups[pos]
                pos += 1
                task = TaskRef.of(g)
                if g.is_eval:
                    sel.delta["skipped_eval"] += 1
                elif task is not None and sel.taken.get(_bitmap(task), 0) >> task.index & 1:
                    sel.delta["dropped_duplicate"] += 1
                elif self.max_staleness is not None and g.staleness(current_version) > self.max_staleness:
                    sel.delta["dropped_stale"] += 1
                    if g.info.get("claims"):
                        sel.lost[str(g.info["claims"])] += 1
                else:
                    accepted.append((ref, pos - 1, g))
                    if task is not None:
                        sel.taken[_bitmap(task)] = sel.taken.get(_bitmap(task), 0) | 1 << task.index
            if pos < len(groups):
                sel.cursor[ref.stream] = Cursor(ref.seq, pos)
                continue
            sel.cursor[ref.stream] = Cursor(ref.seq + 1, 0)
            if ref.quarantined:
                sel.delta["quarantined_chunks"] += 1
                sel.delta["quarantined_groups"] += ref.n_groups
                if self._tracked:
                    # An unreadable chunk no longer says which tasks its groups were made from; fresh
                    # tasks of a claim set the trainer consumes replace them, or it would wait at the
                    # end of the run for groups that never come.
                    sel.lost[self._tracked[0]] += ref.n_groups
            nxt = self._known[ref.stream].get(ref.seq + 1)
            if nxt is not None:
                heapq.heappush(heap, (self._order_key(nxt), nxt))
        return accepted

    def _select(self, n: int, current_version: int) -> _Selection:
        """Without replay: the next `n` groups in commit order, each read once; nothing in `self`
        moves (the caller commits a full batch)."""
        sel = _Selection(dict(self._cursor), dict(self._taken))
        sel.picked = [g for _, _, g in self._walk(n, current_version, sel)]
        sel.reads = [1] * len(sel.picked)
        sel.delta["consumed"] += len(sel.picked)
        return sel

    def _select_replay(self, n: int, current_version: int) -> _Selection:
        """With replay (or a replay buffer left by a stage that had it): admit every listed group to a
        copy of the buffer, then pick the `n` ready groups of highest priority (rfthpc.algorithms.replay)."""
        policy, now = self.replay, time.time()
        sel = _Selection(dict(self._cursor), dict(self._taken), buffer=self._buffer.copy())
        buf = sel.buffer
        while len(self._pool_cache) > _POOL_CHUNKS_CACHED:
            self._pool_cache.popitem(last=False)
        if policy is None:
            # This stage reads without replay: the groups never read are still owed, the others are done.
            for slot, e in list(buf.entries.items()):
                if e.uses:
                    buf.remove(slot)
        if self.max_staleness is not None:
            for slot, e in list(buf.entries.items()):
                if current_version - e.version > self.max_staleness:
                    buf.remove(slot)
                    self._left_unread(sel, e, "dropped_stale")
        capacity = policy.capacity if policy is not None else sys.maxsize
        events: list[tuple[float, Slot, Group | None]] = [(buf.entries[s].since, s, None) for s in buf.due(now)]
        if policy is not None:
            events += [(ref.commit_ns / 1e9, Slot(ref.stream, ref.seq, pos), g)
                       for ref, pos, g in self._walk(None, current_version, sel)]
        # Groups enter in the order they arrived: committed, or back from their cooldown.
        for at, slot, g in sorted(events, key=lambda ev: (ev[0], ev[1])):
            if g is None:
                entry = replace(buf.entries[slot], cooling=False)
            else:
                task = TaskRef.of(g)
                priority = policy.priority(g.policy_version, 0, self._rng)
                entry = Entry(g.policy_version, 0, 0.0 if priority is None else priority, at,
                              task=None if task is None else (task.claims, task.epoch, task.index))
                if priority is None:  # the priority function turns it away at once
                    self._left_unread(sel, entry, "evicted")
                    continue
            for _, gone in buf.enter(slot, entry, capacity):
                self._left_unread(sel, gone, "evicted")
        for slot in buf.order():
            if len(sel.picked) == n:
                break
            groups = self._pool_groups(slot)
            if groups is None:
                continue
            entry = buf.entries[slot]
            if slot.pos >= len(groups):  # its chunk was quarantined since it was admitted
                buf.remove(slot)
                self._left_unread(sel, entry, "quarantined_groups")
                continue
            sel.picked.append(groups[slot.pos])
            sel.reads.append(entry.uses + 1)
            sel.delta["reused" if entry.uses else "consumed"] += 1
            if policy is None:
                buf.remove(slot)
            else:
                buf.read(slot, policy, self._rng, now)
        if policy is None and len(sel.picked) < n:
            # The buffer's last unread groups are not a batch: the rest comes in commit order.
            more = [g for _, _, g in self._walk(n - len(sel.picked), current_version, sel)]
            sel.picked += more
            sel.reads += [1] * len(more)
            sel.delta["consumed"] += len(more)
        return sel

    def _left_unread(self, sel: _Selection, entry: Entry, counter: str) -> None:
        """Count a group that leaves the replay buffer; one never read is lost (its task is no longer
        taken, and a tracked claim set's explorers replace it). One read before simply ends its reuse."""
        if entry.uses:
            return
        sel.delta[counter] += 1
        if entry.task is not None:
            claims, epoch, index = entry.task
            sel.lost[claims] += 1
            key = _bitmap(TaskRef(claims, epoch, index))
            sel.taken[key] = sel.taken.get(key, 0) & ~(1 << index)

    def _pool_groups(self, slot: Slot) -> list[Group] | None:
        """The groups of the chunk holding a replay buffer entry: from the reader's caches or read again;
        None when it cannot be read now (missing from the listing, vanished, or a filesystem error),
        an empty list when it turned out damaged (quarantined)."""
        key = (slot.stream, slot.seq)
        if key in self._cache:
            return self._cache[key]
        if key in self._pool_cache:
            self._pool_cache.move_to_end(key)
            return self._pool_cache[key]
        ref = self._pool_refs.get(key) or self._known.get(slot.stream, {}).get(slot.seq)
        if ref is None:
            if key not in self._missing_warned:
                self._missing_warned.add(key)
                log.warning("replay buffer: chunk %d of experience stream %s is not in the store; its groups in the "
                            "buffer are skipped until it reappears or they leave the buffer (too stale, or pushed "
                            "out)", slot.seq, slot.stream)
            return None
        if ref.quarantined:
            return []
        try:
            attrs, groups = read_chunk(ref.path)
            if (attrs.get("stream"), attrs.get("seq"), len(groups)) != (ref.stream, ref.seq, ref.n_groups):
                raise ChunkCorrupt(ref.path, f"its content says stream {attrs.get('stream')} chunk {attrs.get('seq')} "
                                             f"with {len(groups)} groups, not what its name says")
        except FileNotFoundError:
            return None
        except OSError as e:
            if key not in self._unreadable:
                log.warning("chunk %s could not be read (%s); its groups in the replay buffer wait for the next "
                            "poll", ref.path, e)
            self._unreadable.add(key)
            return None
        except ChunkCorrupt as e:
            dest = quarantine(self.store, ref, str(e))
            self._pool_refs[key] = ChunkRef(ref.explorer, ref.rank, ref.token, ref.seq, ref.commit_ns, ref.n_groups,
                                            dest, quarantined=True)
            return []
        self._unreadable.discard(key)
        self._pool_cache[key] = groups
        return groups

    def take(self, n_groups: int, current_version: int, timeout_s: float | None = None) -> list[Group]:
        """Return the next `n_groups` training groups: without replay the next committed in commit order,
        each exactly once; with replay the `n_groups` of highest priority in the replay buffer, each at
        most as often as the replay policy allows (rfthpc.algorithms.replay).

        Eval groups are skipped and stale groups (`current_version - policy_version > max_staleness`)
        dropped, both counted in `metrics()`. Waits for groups to arrive; raises StoreTimeout after
        `timeout_s` (None: wait forever) with nothing consumed, so a later call gets them.
        """
        if n_groups < 1:
            raise ValueError(f"n_groups must be >= 1, got {n_groups}")
        start = time.monotonic()
        got = 0

        def attempt() -> _Selection | None:
            nonlocal got
            self._scan()
            if self.replay is not None or len(self._buffer):
                sel = self._select_replay(n_groups, current_version)
            else:
                sel = self._select(n_groups, current_version)
            self._lost_pending = sel.lost
            self._report_losses()
            got = len(sel.picked)
            return sel if got == n_groups else None

        found = self.waiter.wait(attempt, [self.doorbell], timeout_s)
        if found is None:
            raise StoreTimeout(
                f"only {got} of {n_groups} experience groups were committed to {self.store} within "
                f"{timeout_s:.1f} s; explorers may be slow, dead or not started (see `rfthpc store inspect`)"
            )
        self._commit(found, current_version, time.monotonic() - start)
        return found.picked

    def _commit(self, sel: _Selection, current_version: int, waited_s: float) -> None:
        picked, cursor = sel.picked, sel.cursor
        self._cursor = cursor
        self._taken = sel.taken
        if sel.buffer is not None:
            self._buffer = sel.buffer
        self._counters.update(sel.delta)
        self._lost.update(self._lost_pending)
        self._lost_pending = Counter()
        staleness = [g.staleness(current_version) for g in picked]
        self._staleness_hist.update(staleness)
        self._version_hist.update(g.policy_version for g in picked)
        pooled = {(slot.stream, slot.seq) for slot in self._buffer.entries}
        for stream, chunks in self._known.items():
            seq = cursor.get(stream, Cursor()).seq
            for s in [s for s in chunks if s < seq]:
                ref = chunks.pop(s)
                groups = self._cache.pop((stream, s), None)
                self._seen_at.pop((stream, s), None)
                if (stream, s) in pooled:
                    # Behind the cursor now, but the replay buffer will read it again.
                    self._pool_refs[(stream, s)] = ref
                    if groups is not None:
                        self._pool_cache[(stream, s)] = groups
        for key in [k for k in self._pool_refs if k not in pooled]:
            del self._pool_refs[key]
        for key in [k for k in self._pool_cache if k not in pooled]:
            del self._pool_cache[key]
        self._last = {
            "take_wait_s": waited_s,
            "batch_staleness_mean": sum(staleness) / len(staleness),
            "batch_staleness_max": float(max(staleness)),
            "batch_reused": float(sum(r > 1 for r in sel.reads)),
            "batch_reads_max": float(max(sel.reads)),
            "current_version": current_version,
        }
        # For `rfthpc store inspect`; not the durable state (that is the checkpoint's `state()`).
        if time.monotonic() - self._progress_written >= _PROGRESS_EVERY_S:
            self._write_progress()

    def _write_progress(self) -> None:
        write_reader_progress(self.store, ReaderProgress(time.time(), self._last.get("current_version"), self.state(),
                                                  self.metrics()))
        self._progress_written = time.monotonic()

    # ---- losses --------------------------------------------------------------------------------

    def track_tasksets(self, names: list[str]) -> None:
        """Announce that the trainer consumes the groups of these claim sets (`TaskClaims` names):
        from now on their explorers replace every group it drops as stale with a fresh task."""
        self._tracked = list(names)
        self._losses_written = None
        self._report_losses()

    def losses(self) -> dict[str, int]:
        """Groups lost per claim set (dropped as stale, or in a quarantined chunk: counted to the
        first claim set tracked): those consumed past, and those the current wait for a batch has
        walked past (they are dropped when the batch completes)."""
        return dict(self._lost + self._lost_pending)

    def _report_losses(self) -> None:
        if not self._tracked:
            return
        lost = self.losses()
        report = {name: lost.get(name, 0) for name in self._tracked}
        if report != self._losses_written:
            write_losses(self.store, report)
            self._losses_written = report

    # ---- state ---------------------------------------------------------------------------------

    def state(self) -> ReaderState:
        """The consumption state: save it in the trainer checkpoint."""
        return ReaderState(
            cursor=dict(sorted(self._cursor.items())),
            counters={k: int(self._counters[k]) for k in COUNTERS},
            lost=dict(sorted(self._lost.items())),
            taken=dict(self._taken),
            staleness_hist=dict(self._staleness_hist),
            version_hist=dict(self._version_hist),
            replay=dict(self._buffer.entries),
        )

    def load_state(self, state: ReaderState) -> None:
        """Resume from a `state()` (from the checkpoint the trainer resumes)."""
        self._cursor = dict(state.cursor)
        self._counters = Counter(state.counters)
        self._staleness_hist = Counter(state.staleness_hist)
        self._version_hist = Counter(state.version_hist)
        self._lost = Counter(state.lost)
        self._taken = dict(state.taken)
        self._buffer = ReplayBuffer(state.replay)
        self._lost_pending = Counter()
        self._report_losses()
        self._known.clear()
        self._cache.clear()
        self._seen_at.clear()
        self._pool_refs.clear()
        self._pool_cache.clear()

    def mark_checkpointed(self, state: ReaderState) -> None:
        """Record `state` as the one in the newest complete trainer checkpoint.

        Garbage collection deletes only chunks consumed according to this state, so a trainer
        that resumes from that checkpoint still finds every group it has not consumed.
        """
        write_checkpointed(self.store, state)
        self._write_progress()

    def metrics(self) -> dict[str, float]:
        """Counters since the run started (restored from checkpoints) and figures of the last take."""
        pending = 0
        for stream, chunks in self._known.items():
            seq, done = self._cursor.get(stream, Cursor())
            pending += sum(r.n_groups for r in chunks.values() if not r.quarantined) - (done if seq in chunks else 0)
        entries = self._buffer.entries.values()
        pending += sum(not e.uses for e in entries)
        out = {f"store/{k}": float(self._counters[k]) for k in COUNTERS}
        out["store/pending"] = float(pending)
        if self.replay is not None or entries:
            out["store/replay_size"] = float(len(entries))
            out["store/replay_cooling"] = float(sum(e.cooling for e in entries))
        if self.visible_latencies:
            lat = sorted(self.visible_latencies)
            out["store/visible_latency_p50_s"] = lat[len(lat) // 2]
        out.update({f"store/{k}": v for k, v in self._last.items()})
        return out


def _bitmap(task: TaskRef) -> str:
    """The taken-task bitmap a task's bit lives in: one per claim set and epoch (`<claims>:<epoch>`)."""
    return f"{task.claims}:{task.epoch}"
