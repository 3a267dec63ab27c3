"""Following the trainer's published policies, with the next version prefetched in the background.

A background thread watches `weights/latest`. When a newer version appears it plans how to rebuild
it (`rfthpc.weights.chain`): from the bits of the version it staged last plus the deltas after it,
or, for a new or requeued explorer or after a checksum mismatch, from the newest full snapshot and
the deltas after that. Before reading it names what it needs in its reader file (clean-up keeps
those files; the heartbeat renews the file), rebuilds the version tensor by tensor, checks every
tensor's checksum, and writes it as one safetensors file into a node-local staging directory
(`filesystem.staging_dir`, /dev/shm by default: memory), and maps it into this process ahead
(`safetensors_read.premap`). Only then does the explorer, between two batches (`update`), copy it into
the engine in place: the stall at a sync is that copy from memory, not a read of the shared
filesystem. A LoRA run's versions are adapters: they are staged as PEFT directories
(adapter_config.json beside adapter_model.safetensors), which the engines apply to their base model.

Staging holds at most two versions per explorer process (the one the engine holds, whose bits the
next delta applies to, and the next); each process has its own directory, removed when it stops.
A delta whose checksums do not match is logged, counted and never used again; the version is then
rebuilt from the newest full snapshot (and an explorer whose chain has no such snapshot keeps its
version until the trainer publishes the next full snapshot).

On the trainer's own node (`slurm.layout: colocated`, `rfthpc run`) the trainer leaves a copy of each
version in node-local memory (`rfthpc.weights.node_local`); the prefetcher then hard-links that file
into staging, reading nothing from the shared filesystem.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfthpc.config.lora import ADAPTER_CONFIG
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.handoff import Doorbell, Waiter, WaitPolicy
from rfthpc.weights import chain as weight_chain
from rfthpc.weights import node_local, published, safetensors_read
from rfthpc.weights.delta import DeltaCorrupt

if TYPE_CHECKING:
    from rfthpc.engines.base import PolicyEngine

log = logging.getLogger(__name__)

STAGED_FILE = "model.safetensors"
_STAGED_BELL = "staged"


@dataclass
class WeightStats:
    """What following the policy cost this explorer: the figures of the version held now, and totals."""

    load_s: float = 0.0
    """Seconds the background read, rebuild and staging of the version held took."""
    stall_s: float = 0.0
    """Seconds exploration stopped for its in-place load from staging."""
    bytes_read: int = 0
    """Bytes of the run directory read to rebuild it (a full snapshot's or deltas')."""
    from_full: bool = False
    """It was rebuilt from a full snapshot (a start, a requeue or a fallback)."""
    from_node_local: bool = False
    """It was the trainer's node-local copy (nothing read from the run directory)."""
    loads: int = 0
    node_local_loads: int = 0
    """Versions taken from the trainer's node-local copies, over the explorer's life."""
    checksum_failures: int = 0
    """Deltas (or full snapshots) that did not match their checksums, over the explorer's life."""
    history: list[tuple[int, float, float, int]] = field(default_factory=list)
    """(version, load_s, stall_s, bytes_read) of every version loaded."""


@dataclass(frozen=True)
class _Staged:
    version: int
    path: Path
    crcs: dict[str, int]
    load_s: float
    bytes_read: int
    from_full: bool
    from_node_local: bool = False


class WeightFollower:
    """Keeps an engine on the newest published policy (prefetched into staging), and its reader file fresh."""

    def __init__(self, run: RunDir, explorer: str, rank: int, staging_root: Path | None = None,
                 poll_s: float = 1.0) -> None:
        self.run = run
        self.explorer = explorer
        self.rank = rank
        self.poll_s = poll_s
        self.engine: PolicyEngine | None = None
        self.version = 0
        self.stats = WeightStats()
        root = staging_root or node_local.default_staging_root()
        self.staging = root / f"rfthpc-{node_local.run_key(run.root)}" / f"{explorer}-{rank}"
        self.node_local = node_local.node_local_dir(root, run.root)
        """Where a trainer on this node leaves its copies of the versions it publishes."""
        self._top: _Staged | None = None
        """The newest staged version (the engine's, or newer and ready to load)."""
        self._lock = threading.Lock()
        self._lease_lock = threading.Lock()
        self._named: tuple[int, int | None] | None = None
        """(version, held) the reader file names (the heartbeat thread renews exactly that)."""
        self._bad: set[Path] = set()
        """Delta files and snapshot directories found corrupt (never used again)."""
        self._incomplete: int | None = None
        """The last version found not rebuildable (logged once)."""
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- start -------------------------------------------------------------------------------------

    def start_point(self, initial_model: str) -> tuple[int, str]:
        """The version and directory to build the engine from, already named in the reader file: the
        newest full snapshot (not newer than `latest`), else the initial model as version 0. The
        deltas after it are prefetched once the engine is attached."""
        while True:
            newest = weight_chain.newest_full(self.run.root, published.read_latest(self.run.root))
            if newest is None:
                self.write_lease(0)
                return 0, initial_model
            self.write_lease(newest)
            # Named only now: the trainer may have removed it in between (it reads the reader files
            # before it removes STABLE); a newer one is complete then.
            if published.is_complete(self.run.weights_step(newest)):
                return newest, str(self.run.weights_step(newest))

    def attach(self, engine: PolicyEngine, version: int, background: bool = True) -> None:
        """Follow with `engine`, which holds `version` now; start prefetching on a background thread
        (`background=False`: only when `prefetch` is called)."""
        self.engine = engine
        self.version = version
        self.write_lease(version)
        shutil.rmtree(self.staging, ignore_errors=True)  # a previous process of this rank on this node
        self.staging.mkdir(parents=True, exist_ok=True)
        if not background:
            return
        self._thread = threading.Thread(target=self._prefetch_loop, name="rfthpc-prefetch", daemon=True)
        self._thread.start()

    # ---- reader file -------------------------------------------------------------------------------

    def write_lease(self, version: int, held: int | None = None) -> None:
        """Name `version` (and the deltas after `held`) in this process's reader file (now)."""
        with self._lease_lock:
            published.record_reader(self.run.root, self.explorer, self.rank, version, held)
            self._named = (version, held)

    def refresh_lease(self) -> None:
        """Rewrite the reader file with what it names (the heartbeat; nothing before the first name)."""
        with self._lease_lock:
            if self._named is not None:
                published.record_reader(self.run.root, self.explorer, self.rank, *self._named)

    # ---- the explorer's side -----------------------------------------------------------------------

    def doorbells(self) -> list[Doorbell]:
        """What rings when a newer policy may be ready: `weights/latest`, and staging (node-local)."""
        return [published.latest_doorbell(self.run.root), Doorbell(self.staging / _STAGED_BELL)]

    def ready(self) -> int | None:
        """The staged version newer than the engine's, if there is one."""
        with self._lock:
            top = self._top
        return top.version if top is not None and top.version > self.version else None

    def update(self) -> bool:
        """Load the newest staged version into the engine if it is newer than the one held; True if loaded."""
        assert self.engine is not None, "attach() an engine first"
        with self._lock:
            top = self._top
            if top is None or top.version <= self.version:
                return False
            # Under the lock: the prefetcher removes staged versions other than the newest.
            start = time.perf_counter()
            self.engine.load_weights(top.path)
            stall = time.perf_counter() - start
        s = self.stats
        s.load_s, s.stall_s, s.bytes_read, s.from_full = top.load_s, stall, top.bytes_read, top.from_full
        s.from_node_local = top.from_node_local
        s.loads += 1
        s.node_local_loads += top.from_node_local
        s.history.append((top.version, top.load_s, stall, top.bytes_read))
        source = ", from a full snapshot" if top.from_full else ", the trainer's node-local copy" \
            if top.from_node_local else ""
        log.info("loaded policy version %d in %.3f s (prefetched in %.2f s, %.1f MB read%s)", top.version, stall,
                 top.load_s, top.bytes_read / 1e6, source)
        self.version = top.version
        return True

    def close(self) -> None:
        """Stop prefetching, drop staging and the reader file: this process needs no published weights any more."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        with self._lease_lock:
            self._named = None
            published.clear_reader(self.run.root, self.explorer, self.rank)
        with self._lock:
            if self._top is not None:
                safetensors_read.forget(self._top.path)
        shutil.rmtree(self.staging, ignore_errors=True)
        newest = node_local.copies(self.node_local)
        if newest and newest[0] <= self.version:
            node_local.clear(self.node_local)  # the trainer's last copy, loaded: nothing newer will come

    # ---- the prefetcher ----------------------------------------------------------------------------

    def _newer(self) -> int | None:
        latest = published.read_latest(self.run.root)
        top = self._top.version if self._top is not None else self.version
        return latest if latest is not None and latest > top else None

    def _prefetch_loop(self) -> None:
        waiter = Waiter(WaitPolicy(slow_s=self.poll_s))
        bell = [published.latest_doorbell(self.run.root)]
        while not self._closing.is_set():
            target = waiter.wait(self._newer, bell, None, stop=self._closing.is_set)
            if target is None:
                return
            try:
                if not self.prefetch(target):
                    self._closing.wait(self.poll_s)
            except Exception:
                log.exception("could not prefetch policy version %d; trying again", target)
                self._closing.wait(self.poll_s)

    def prefetch(self, target: int) -> bool:
        """Rebuild `target` (or the newest version its files allow) into staging; True if a newer
        version was staged. Runs on the prefetch thread, or where the caller chose (`attach`)."""
        top = self._top
        if target > (top.version if top is not None else self.version):
            linked = self._link_node_local(target)
            if linked is not None:
                return self._hold(linked)
        held = top.version if top is not None else None
        chain = weight_chain.newest_rebuildable(self.run.root, target, held, frozenset(self._bad))
        if (chain is None or chain.target < target) and self._incomplete != target:
            self._incomplete = target
            log.info("policy version %d cannot be rebuilt yet (a snapshot with no STABLE marker yet, or a missing or "
                     "corrupt delta); using version %s until it can", target,
                     chain.target if chain is not None else "held now")
        if chain is None or chain.target <= (top.version if top is not None else self.version):
            return False
        self.write_lease(chain.target, None if chain.from_full else chain.start)
        try:
            staged = self._stage(chain, top)
        except FileNotFoundError as e:
            # Removed between planning and opening (clean-up did not see the reader file yet): plan again.
            log.info("a file of policy version %d's chain went away (%s); planning again", chain.target, e)
            return False
        except DeltaCorrupt as e:
            self.stats.checksum_failures += 1
            self._bad.add(e.path)
            log.error("policy version %d does not rebuild bit for bit (%s); never using %s again and rebuilding "
                      "from the newest full snapshot (%d checksum failures so far)",
                      chain.target, e, e.path.name, self.stats.checksum_failures)
            with self._lock:
                self._top = None  # the next rebuild starts from a full snapshot
            self._remove_unused()
            return False
        return self._hold(staged)

    def _hold(self, staged: _Staged) -> bool:
        """Make `staged` the newest staged version, ready for `update`; True."""
        # In-process engines then load it without a page fault per page (rfthpc.weights.safetensors_read).
        safetensors_read.premap(staged.path)
        with self._lock:
            self._top = staged
        self._remove_unused()
        Doorbell(self.staging / _STAGED_BELL).ring()
        self.write_lease(staged.version, staged.version)
        return True

    def _link_node_local(self, version: int) -> _Staged | None:
        """Stage the trainer's node-local copy of `version` by a hard link (a copy where links fail); None
        if this node has none (another node's trainer, a LoRA run, or the copy already dropped)."""
        start = time.perf_counter()
        found = node_local.read_copy(self.node_local, version)
        if found is None:
            return None
        source, crcs = found
        out = self.staging / f"v{version}"
        tmp = self.staging / f".tmp-v{version}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            node_local.link_or_copy(source, tmp / STAGED_FILE)
            os.rename(tmp, out)
        except FileNotFoundError:
            shutil.rmtree(tmp, ignore_errors=True)
            return None  # dropped by the trainer meanwhile: the run directory has it
        return _Staged(version, out, crcs, time.perf_counter() - start, 0, False, from_node_local=True)

    def _stage(self, chain: weight_chain.Chain, top: _Staged | None) -> _Staged:
        """Rebuild `chain`'s target into `staging/v<N>` (one safetensors file, with its adapter_config.json
        for an adapter); the chain's files are read once, the held bits from the staged copy of `top`."""
        from rfthpc.weights.safetensors_read import SafetensorsDir
        from rfthpc.weights.safetensors_write import write_shards

        start = time.perf_counter()
        held = held_crcs = None
        start_dir = self.run.weights_step(chain.start)
        if not chain.from_full:
            assert top is not None and top.version == chain.start
            start_dir = top.path
            files = SafetensorsDir(top.path)
            held = {n: files.tensor(n) for n in files.names()}
            held_crcs = top.crcs
        out = self.staging / f"v{chain.target}"
        tmp = self.staging / f".tmp-v{chain.target}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        crcs: dict[str, int] = {}
        adapter = published.is_adapter_dir(start_dir)
        try:
            with weight_chain.ChainReader(self.run.root, chain, held, held_crcs) as reader:

                def tensors():
                    for name, tensor, crc in reader:
                        crcs[name] = crc
                        yield name, [tensor]

                write_shards(tmp, reader.entries(), tensors(), max_shard_size=2**62,
                             stem="adapter_model" if adapter else "model")
            if adapter:
                shutil.copyfile(start_dir / ADAPTER_CONFIG, tmp / ADAPTER_CONFIG)
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return _Staged(chain.target, out, crcs, time.perf_counter() - start, reader.bytes_read, chain.from_full)

    def _remove_unused(self) -> None:
        """Drop staged versions but the newest (the engine copied what it loaded; the next delta
        applies to the newest). Under the lock: `update` may be loading one."""
        with self._lock:
            keep = self._top.path.name if self._top is not None else None
            for entry in os.scandir(self.staging):
                if entry.is_dir() and entry.name.startswith("v") and entry.name != keep:
                    safetensors_read.forget(Path(entry.path))
                    shutil.rmtree(entry.path, ignore_errors=True)
