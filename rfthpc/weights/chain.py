"""Rebuilding any published version from full snapshots and deltas, and removing what nobody needs.

A version's chain is where its bits come from: either a full snapshot `weights/step_<F>` (or the
bits a reader already holds, of version H) followed by the deltas of every version after it up to
the target, each delta naming its base. `plan_chain` walks back from the target through the
deltas' bases; every link is checked (a delta's recorded base checksum must equal its base
version's checksum), so a version republished by a resumed trainer never joins a chain it does
not belong to.

Clean-up (`collect_published`) keeps: the chains of `latest` and of the `keep` newest versions, so
a new explorer can always reach `latest` from a full snapshot; for every live reader, every delta
after the version it holds, or, while it rebuilds a version from a full snapshot, that chain. A full snapshot goes the way
`rfthpc.weights` describes (its `STABLE` marker first, then the reader files are read again); a
delta file is removed after that second look. A reader opens every file of its chain right after
naming it, so a removal it did not see coming cannot cut a read short (POSIX keeps an open file's
data); if a file is gone before it is opened, the reader plans again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

from rfthpc.config.lora import read_adapter_config
from rfthpc.errors import UserError
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import write_text_atomic
from rfthpc.weights import published
from rfthpc.weights.delta import DeltaCorrupt, DeltaFooter, DeltaReader, read_footer, version_checksum

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chain:
    """How to rebuild version `target`: the bits of version `start` (a full snapshot if `from_full`,
    else the bits the caller holds), then `deltas` (versions) applied in order."""

    target: int
    start: int
    from_full: bool
    deltas: tuple[int, ...]

    def versions(self) -> set[int]:
        """Every version whose files the chain reads."""
        return ({self.start} if self.from_full else set()) | set(self.deltas)


def _full_checksum(run_dir: Path, version: int) -> str | None:
    crcs = published.read_checksums(published.step_dir(run_dir, version))
    return None if crcs is None else version_checksum(crcs)


def plan_chain(run_dir: Path, target: int, held: int | None = None,
               versions: tuple[set[int], set[int]] | None = None, skip: frozenset[Path] = frozenset()
               ) -> Chain | None:
    """The cheapest way to rebuild `target` that the files in weights/ allow, or None.

    From the bits of `held` (the caller's) when the deltas after it reach `target`; else from the
    newest full snapshot on the way back from `target`. Files in `skip` (found corrupt: delta
    files, snapshot directories) are not used. `versions` is `published.published_versions(run_dir)` if the
    caller has it.
    """
    full, deltas = published.published_versions(run_dir) if versions is None else versions
    full, deltas = _with_named(run_dir, target, full, deltas)
    applied: list[int] = []
    best: Chain | None = None
    v = target
    link: str | None = None  # the checksum the version below must have (from the delta above it)
    while True:
        if v == held:
            return Chain(target, v, False, tuple(reversed(applied)))
        if v in full and best is None and published.step_dir(run_dir, v) not in skip \
                and (link is None or _full_checksum(run_dir, v) in (link, None)):
            best = Chain(target, v, True, tuple(reversed(applied)))
            if held is None or v < held:
                return best
        if v not in deltas or published.delta_file(run_dir, v) in skip:
            return best
        try:
            footer = read_footer(published.delta_file(run_dir, v))
        except (FileNotFoundError, DeltaCorrupt):
            return best
        if link is not None and footer.checksum != link:
            return best
        applied.append(v)
        link = footer.base_checksum
        if held is not None and footer.base < held:
            return best
        v = footer.base
        full, deltas = _with_named(run_dir, v, full, deltas)


def _with_named(run_dir: Path, v: int, full: set[int], deltas: set[int]) -> tuple[set[int], set[int]]:
    """(full, deltas) with version `v`'s files looked up by name if the listing had neither: on
    another node a directory may list a new file a little after its name can be opened."""
    if v in full or v in deltas:
        return full, deltas
    found_full = {v} if published.is_complete(published.step_dir(run_dir, v)) else set()
    found_delta = {v} if published.delta_file(run_dir, v).is_file() else set()
    return full | found_full, deltas | found_delta


def newest_rebuildable(run_dir: Path, at_most: int, held: int | None = None,
                       skip: frozenset[Path] = frozenset()) -> Chain | None:
    """The chain of the newest version not newer than `at_most` that the files allow (see `plan_chain`)."""
    full, deltas = _with_named(run_dir, at_most, *published.published_versions(run_dir))
    for v in sorted((full | deltas | ({held} if held is not None else set())), reverse=True):
        if v <= at_most and (chain := plan_chain(run_dir, v, held, (full, deltas), skip)) is not None:
            return chain
    return None


def newest_full(run_dir: Path, at_most: int | None = None) -> int | None:
    """The newest version with a full snapshot (not newer than `at_most`), or None."""
    full, _ = published.published_versions(run_dir)
    eligible = [v for v in full if at_most is None or v <= at_most]
    return max(eligible) if eligible else None


class ChainReader:
    """The tensors of a chain's target version, rebuilt one at a time and checked bit for bit.

    Opens every delta of the chain at once (see the module docstring). `held` maps tensor names to
    the caller's bits of `chain.start` when the chain does not start from a full snapshot, and
    `held_crcs` to their CRC-32 (computed when missing). DeltaCorrupt if anything does not match.
    """

    def __init__(self, run_dir: Path, chain: Chain, held: dict[str, torch.Tensor] | None = None,
                 held_crcs: dict[str, int] | None = None) -> None:
        self.chain = chain
        self.run_dir = Path(run_dir)
        self._full_bytes = 0
        self._deltas: list[DeltaReader] = []
        try:
            for v in chain.deltas:
                self._deltas.append(DeltaReader(published.delta_file(run_dir, v)))
            if chain.from_full:
                from rfthpc.weights.safetensors_read import SafetensorsDir

                self._full = SafetensorsDir(published.step_dir(run_dir, chain.start))
                self._base_crcs = published.read_checksums(published.step_dir(run_dir, chain.start))
            else:
                if held is None:
                    raise ValueError("a chain from held bits needs them")
                self._held = held
                self._base_crcs = held_crcs
        except BaseException:
            self.close()
            raise

    @property
    def bytes_read(self) -> int:
        """Bytes of published files read so far (tensors of the full snapshot, delta frames)."""
        return self._full_bytes + sum(d.bytes_read for d in self._deltas)

    @property
    def footer(self) -> DeltaFooter | None:
        """The footer of the chain's last delta (None for a full snapshot alone)."""
        return self._deltas[-1].footer if self._deltas else None

    def entries(self) -> list:
        """A `TensorEntry` (name, shape, dtype) per tensor of the target version, in `names()` order."""
        import torch

        from rfthpc.weights.safetensors_write import TensorEntry

        if self._deltas:
            return [TensorEntry(t.name, t.shape, getattr(torch, t.dtype)) for t in self._deltas[-1].footer.tensors]
        if self.chain.from_full:
            return self._full.entries()
        return [TensorEntry(n, tuple(t.shape), t.dtype) for n, t in sorted(self._held.items())]

    def names(self) -> list[str]:
        """Tensor names of the target version, in the order the publisher wrote them."""
        if self._deltas:
            return [t.name for t in self._deltas[-1].footer.tensors]
        return self._full.names() if self.chain.from_full else sorted(self._held)

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor, int]]:
        """(name, tensor, CRC-32) of every tensor of the target version."""
        from rfthpc.weights.delta import tensor_crc

        for name in self.names():
            if self.chain.from_full:
                tensor = self._full.tensor(name)
                self._full_bytes += tensor.nbytes
            else:
                tensor = self._held[name]
            recorded = None if self._base_crcs is None else self._base_crcs.get(name)
            crc = tensor_crc(tensor) if recorded is None or self.chain.from_full else recorded
            if recorded is not None and crc != recorded:
                raise DeltaCorrupt(published.step_dir(self.run_dir, self.chain.start),
                                   f"{name} does not match its recorded checksum")
            for delta in self._deltas:
                tensor, crc = delta.apply(name, tensor, crc)
            yield name, tensor, crc

    def close(self) -> None:
        """Close the open files."""
        for d in self._deltas:
            d.close()
        full = getattr(self, "_full", None)
        if full is not None:
            full.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def materialize(run_dir: Path, version: int, out: Path) -> Chain:
    """Write version `version` as a Hugging Face model directory `out` (configuration from the full
    snapshot it is rebuilt from; a LoRA run's version as a PEFT adapter directory); UserError naming
    what exists if it cannot be rebuilt."""
    run = RunDir(run_dir)
    chain = plan_chain(run.root, version)
    if chain is None:
        full, deltas = published.published_versions(run.root)
        raise UserError(f"version {version} cannot be rebuilt from {run.weights}: full snapshots "
                        f"{sorted(full) or 'none'}, deltas {sorted(deltas) or 'none'}; pick one of those versions")
    if Path(out).exists() and any(Path(out).iterdir()):
        raise UserError(f"{out} exists and is not empty; name a new directory with --out")
    start = published.step_dir(run.root, chain.start)
    with ChainReader(run.root, chain) as reader:
        stream = published.TensorStream(reader.entries(), ((n, t) for n, t, _ in reader))
        if published.is_adapter_dir(start):
            published.write_adapter_dir(Path(out), stream, read_adapter_config(start))
        else:
            published.write_hf_dir(Path(out), stream, start)
    return chain


def _protected(run_dir: Path, full: set[int], deltas: set[int], keep: int, leases: list[published.ReaderLease]
               ) -> tuple[set[int], set[int]]:
    """(full snapshots, deltas) that clean-up must keep (see the module docstring)."""
    keep_full: set[int] = set()
    keep_deltas: set[int] = set()
    newest = sorted(full | deltas)
    wanted = set(newest[-keep:]) if keep > 0 else set()
    latest = published.read_latest(run_dir)
    if latest is not None:
        wanted.add(latest)
    for lease in leases:
        if lease.held is None:
            wanted.add(lease.version)     # rebuilding it from a full snapshot
        else:
            keep_deltas |= {d for d in deltas if d > lease.held}
    for v in wanted:
        chain = plan_chain(run_dir, v, None, (full, deltas))
        if chain is None:
            # Not rebuildable (yet): keep what there is of it.
            keep_full |= {v} & full
            keep_deltas |= {v} & deltas
            continue
        keep_full |= {chain.start} if chain.from_full else set()
        keep_deltas |= set(chain.deltas)
    return keep_full, keep_deltas


def collect_published(run_dir: Path, keep: int, lease_s: float, now: float | None = None) -> list[int]:
    """Delete published files no explorer can still need (see the module docstring); return the
    versions that lost a full snapshot or a delta. Also removes temporary snapshots and deltas of
    publishers that died (same host and process gone, or older than an hour)."""
    run = RunDir(run_dir)
    now = time.time() if now is None else now
    full, deltas = published.published_versions(run.root)
    keep_full, keep_deltas = _protected(run.root, full, deltas, keep, published.live_readers(run.root, lease_s, now))
    doomed_full = sorted(full - keep_full)
    doomed_deltas = sorted(deltas - keep_deltas)
    for v in doomed_full:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(published.step_dir(run.root, v) / published.STABLE)
    # An explorer that named a version in its reader file after the look above, and saw its STABLE
    # before it went, may be reading it now: look again once no newcomer can see the marker.
    late_full, late_deltas = _protected(run.root, full, deltas, keep, published.live_readers(run.root, lease_s))
    removed = set()
    for v in doomed_full:
        path = published.step_dir(run.root, v)
        if v in late_full:
            write_text_atomic(path / published.STABLE, f"{v}\n")
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.add(v)
    for v in doomed_deltas:
        if v not in late_deltas:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(published.delta_file(run.root, v))
            removed.add(v)
    try:
        names = os.listdir(run.weights)
    except FileNotFoundError:
        names = []
    for name in names:
        if published.TMP_RE.match(name) and published.tmp_is_stale(run.weights / name, now):
            path = run.weights / name
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
    return sorted(removed)
