"""Garbage collection of the experience store: consumed chunks and stale temporary files.

Rules (docs/store.md, "Garbage collection"):
- a chunk is deleted only when the consumption state of the newest complete trainer checkpoint
  (`StoreReader.mark_checkpointed`) says it is fully consumed and its replay buffer holds none of its
  groups, so a trainer that resumes from that checkpoint still finds every group it may read, and
  the live trainer (which is ahead of its checkpoint) has already read it and no longer can;
- a `.tmp-` file is deleted when its writer is provably dead (same host, process gone) or it is
  older than `tmp_max_age_s` (writing a chunk takes seconds; a live writer never leaves one that old);
- quarantined chunks are kept for a person to look at; directories are kept (a live writer may be
  about to write into one).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rfthpc.rundir.paths import READER_DIR
from rfthpc.sharedfs.fileops import TMP_PREFIX
from rfthpc.sharedfs.locks import process_gone
from rfthpc.store.layout import QUARANTINE_DIR, explorer_dirs, list_chunks, open_store
from rfthpc.store.reader_files import Cursor, ReaderState, read_checkpointed

_TMP_RE = re.compile(r"^" + re.escape(TMP_PREFIX) + r".+?\.(?:h5|json|txt)\.(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}$")


def _tmp_is_stale(path: Path, now: float, tmp_max_age_s: float) -> bool:
    m = _TMP_RE.match(path.name)
    if m is not None and m["host"] == socket.gethostname() and process_gone(int(m["pid"])):
        return True
    try:
        return now - path.stat().st_mtime > tmp_max_age_s
    except FileNotFoundError:
        return False


_REMOVERS = 16


def _remove(path: Path) -> int | None:
    """Delete `path`; its size, or None if it was gone already."""
    try:
        size = path.stat().st_size
        os.unlink(path)
    except FileNotFoundError:
        return None
    return size


def collect_garbage(
    run_dir: Path,
    consumed_state: ReaderState | None = None,
    tmp_max_age_s: float = 3600.0,
    keep_chunks: bool = False,
) -> dict[str, int]:
    """Delete consumed chunks and stale temporary files; return counts of what was removed.

    `consumed_state`: a reader `state()` from a complete checkpoint; by default the one the
    trainer last recorded with `StoreReader.mark_checkpointed` (none recorded: no chunk is deleted).
    `keep_chunks`: delete only temporary files (`filesystem.keep_consumed_chunks`).
    """
    store = open_store(run_dir)
    state = consumed_state if consumed_state is not None else read_checkpointed(store)
    cursor = state.cursor if state is not None else {}
    replayed = {(slot.stream, slot.seq) for slot in state.replay} if state is not None else set()
    removed = {"chunks": 0, "chunk_bytes": 0, "tmp_files": 0}
    doomed = [ref.path for ref in list_chunks(store)
              if not (keep_chunks or ref.quarantined or ref.seq >= cursor.get(ref.stream, Cursor()).seq
                      or (ref.stream, ref.seq) in replayed)]
    # Each removal waits on the metadata server (milliseconds on NFS, Lustre, GPFS), and many
    # explorers leave hundreds of chunks per checkpoint: they are removed in parallel.
    with ThreadPoolExecutor(max_workers=_REMOVERS) as pool:
        for size in pool.map(_remove, doomed):
            if size is not None:
                removed["chunks"] += 1
                removed["chunk_bytes"] += size
    now = time.time()
    dirs = [store, store / READER_DIR, *explorer_dirs(store), *explorer_dirs(store / QUARANTINE_DIR)]
    for d in dirs:
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for name in names:
            if name.startswith(TMP_PREFIX) and _tmp_is_stale(d / name, now, tmp_max_age_s):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(d / name)
                    removed["tmp_files"] += 1
    return removed
