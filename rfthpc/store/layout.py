"""Where the experience store keeps things, and how chunk files are named and found.

    experiences/STORE.json                           marks the directory as a store (format, version)
    experiences/<explorer>/c<rank>-<token>-<seq>-<commit_ns>-<n_groups>.h5    committed chunks
    experiences/<explorer>/.tmp-...                  chunks being written (never read)
    experiences/_quarantine/<explorer>/<chunk>.h5    unreadable chunks moved aside, with <chunk>.error.txt
    experiences/_reader/progress.json                the trainer's consumption state and counters (live)
    experiences/_reader/checkpointed.json            the consumption state of its last complete checkpoint
    experiences/_reader/losses.json                  groups it lost per claim set it consumes (for refills)
                                                     (the three `_reader` files: rfthpc.store.reader_files)
    experiences/_rings/<n>                           one new ring per committed chunk, naming it: the
                                                     trainer's cheap signal that something arrived, seen
                                                     at once on other nodes (rfthpc.sharedfs.handoff)

A *stream* is one writer process: `<explorer>/<rank>-<token>`, where the token is new for every
process start, so a requeued explorer never reuses a file name. Its chunks are numbered 0, 1, 2, ...
in commit order; `commit_ns` is the wall clock at the rename that committed the chunk.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from rfthpc.errors import UserError
from rfthpc.rundir.paths import CONFIG_FILE, RunDir
from rfthpc.sharedfs.fileops import is_temporary, make_dirs, read_json, write_once, write_text_atomic
from rfthpc.sharedfs.handoff import Doorbell

STORE_MARKER = "STORE.json"
STORE_FORMAT = "rfthpc-experience-store"
STORE_VERSION = 1
QUARANTINE_DIR = "_quarantine"
RINGS_DIR = "_rings"
# How long a marker that reads as half-made is read again (GlusterFS: a file's new content shows ~1 s
# late on another client that listed it while it was being written; shared-fs.md).
_MARKER_WAIT_S = 3.0

_CHUNK_RE = re.compile(
    r"^c(?P<rank>\d+)-(?P<token>[0-9a-f]{16})-(?P<seq>\d+)-(?P<commit_ns>\d+)-(?P<n>\d+)\.h5$"
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChunkRef:
    """A committed chunk, known from its file name alone."""

    explorer: str
    rank: int
    token: str
    seq: int
    commit_ns: int
    n_groups: int
    path: Path
    quarantined: bool = False

    @property
    def stream(self) -> str:
        """The writer process that committed it: `<explorer>/<rank>-<token>`."""
        return stream_key(self.explorer, self.rank, self.token)


def stream_key(explorer: str, rank: int, token: str) -> str:
    """The name of one writer process's sequence of chunks."""
    return f"{explorer}/{rank:05d}-{token}"


def chunk_name(rank: int, token: str, seq: int, commit_ns: int, n_groups: int) -> str:
    """The committed file name of chunk `seq` of a stream."""
    return f"c{rank:05d}-{token}-{seq:08d}-{commit_ns:019d}-{n_groups}.h5"


def parse_chunk_name(explorer: str, path: Path, quarantined: bool = False) -> ChunkRef | None:
    """The ChunkRef a committed chunk's path names, or None for any other file."""
    m = _CHUNK_RE.match(path.name)
    if m is None:
        return None
    return ChunkRef(
        explorer=explorer,
        rank=int(m["rank"]),
        token=m["token"],
        seq=int(m["seq"]),
        commit_ns=int(m["commit_ns"]),
        n_groups=int(m["n"]),
        path=path,
        quarantined=quarantined,
    )


def _not_a_store(run_dir: Path, reason: str) -> UserError:
    return UserError(
        f"{run_dir} is not an rfthpc run directory with an experience store: {reason}. "
        "Pass the run directory that `rfthpc submit` or `rfthpc run` created "
        f"(<checkpoint_root_dir>/<project>/<name>, holding {CONFIG_FILE} and experiences/{STORE_MARKER})"
    )


def _names(folder: Path) -> list[str]:
    """The names in `folder`; none while this client cannot list it: missing, or just made by a role on another
    node (GlusterFS may find the folder before it can list it)."""
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []


def open_store(run_dir: Path, create: bool = False) -> Path:
    """Check that `run_dir` holds an experience store and return its directory.

    With `create`, make the store in a run directory that has none yet (one with config.yaml or an
    empty experiences/). A directory that is not a run directory, or an experiences/ directory
    holding something else, is refused with a UserError.
    """
    run = RunDir(run_dir)
    store = run.experiences
    marker = store / STORE_MARKER
    if not run.root.is_dir():
        raise _not_a_store(run.root, "the directory does not exist")
    info = _read_marker(run.root, marker)
    if info is None and create:
        # Ignore temporary names: another role may be creating the store right now.
        existing = [name for name in _names(store) if not is_temporary(name)]
        if not existing and not store.is_dir() and not run.config.is_file():
            raise _not_a_store(run.root, f"it has neither {CONFIG_FILE} nor experiences/")
        if not existing:
            make_dirs(store)
            # Linked into place, never replaced: roles starting together on several nodes each try,
            # and a marker renamed over another's could read as missing (ESTALE) on the loser's node.
            write_once(marker, json.dumps({"format": STORE_FORMAT, "version": STORE_VERSION}).encode())
        info = _read_marker(run.root, marker, missing_is_late=True)
        if info is None:
            raise _not_a_store(run.root, f"{store} holds {existing[:3]} but no {STORE_MARKER}")
    if info is None:
        raise _not_a_store(run.root, f"{marker} is missing")
    if not isinstance(info, dict) or info.get("format") != STORE_FORMAT:
        raise _not_a_store(run.root, f"{marker} does not describe an {STORE_FORMAT}")
    if info.get("version") != STORE_VERSION:
        raise UserError(
            f"the experience store in {store} has format version {info.get('version')!r}, but this rfthpc "
            f"reads version {STORE_VERSION}; use the rfthpc version that created the run"
        )
    return store


def _read_marker(run_root: Path, marker: Path, missing_is_late: bool = False) -> object:
    """The marker's content, None if it is missing. A marker is made once and never replaced, so one
    that reads as invalid JSON (or, with `missing_is_late`, as missing) was made a moment ago on
    another node and this node's client still holds its old state: it is read again for a while."""
    deadline = time.monotonic() + _MARKER_WAIT_S
    while True:
        try:
            info = read_json(marker)
        except ValueError:
            if time.monotonic() >= deadline:
                raise _not_a_store(run_root, f"{marker} is not valid JSON") from None
        else:
            if info is not None or not missing_is_late or time.monotonic() >= deadline:
                return info
        time.sleep(0.05)


def experience_doorbell(store: Path) -> Doorbell:
    """The doorbell explorers ring after each chunk they commit to `store`, its note the chunk's
    path relative to the store (`chunk_note`)."""
    return Doorbell(store / RINGS_DIR)


def chunk_note(ref_path: Path, store: Path) -> bytes:
    """The note of the ring that announces the chunk at `ref_path`: `<explorer>/<chunk file name>`."""
    return str(Path(ref_path).relative_to(store)).encode()


def noted_chunk(store: Path, note: bytes) -> ChunkRef | None:
    """The committed chunk a ring's note names (None for any other note). A chunk is never renamed
    back, so the name alone is enough: a reader on another node need not wait for its directory
    listing to show it (GlusterFS: up to 50 ms after the name itself)."""
    explorer, _, name = note.decode(errors="replace").partition("/")
    if not explorer[:1].isalnum() or not name or "/" in name:
        return None
    return parse_chunk_name(explorer, store / explorer / name)


def explorer_dirs(store: Path) -> list[Path]:
    """The per-explorer chunk directories of a store."""
    try:
        entries = list(os.scandir(store))
    except FileNotFoundError:
        return []
    return sorted(
        Path(e.path)
        for e in entries
        if e.name[:1].isalnum() and e.is_dir(follow_symlinks=False)
    )


def list_chunks(store: Path) -> list[ChunkRef]:
    """Every committed chunk in the store, quarantined ones included (flagged), in no order.

    Temporary files are skipped; a directory that vanishes while listing is tolerated.
    """
    refs: list[ChunkRef] = []
    dirs = [(d, False) for d in explorer_dirs(store)]
    dirs += [(d, True) for d in explorer_dirs(store / QUARANTINE_DIR)]
    for d, quarantined in dirs:
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for name in names:
            if is_temporary(name):
                continue
            ref = parse_chunk_name(d.name, d / name, quarantined)
            if ref is not None:
                refs.append(ref)
    return refs


def quarantine(store: Path, ref: ChunkRef, reason: str) -> Path:
    """Move an unreadable chunk out of the reading path, next to a note saying why; return its new path.

    The chunk keeps its name, so readers still see its place in its stream (an empty chunk) and a
    restarted reader does not wait for it.
    """
    dest_dir = make_dirs(store / QUARANTINE_DIR / ref.explorer)
    dest = dest_dir / ref.path.name
    write_text_atomic(dest.with_name(dest.name + ".error.txt"), reason + "\n")
    with contextlib.suppress(FileNotFoundError):
        os.replace(ref.path, dest)
    log.error("quarantined experience chunk %s -> %s: %s", ref.path, dest, reason)
    return dest
