"""The explorer's side of the store: buffer groups, commit them in chunks, atomically.

Commit protocol (docs/store.md): write the chunk under a `.tmp-` name in the explorer's directory,
fsync it, then `os.replace` it onto its committed name, which carries the stream, the chunk's
sequence number and the commit time, then fsync the directory. A reader sees the whole chunk or
nothing; a writer killed mid-chunk leaves only a `.tmp-` file that readers ignore and GC removes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from rfthpc.errors import UserError
from rfthpc.rundir.paths import check_name
from rfthpc.sharedfs.fileops import fsync_dir, make_dirs, temporary_name
from rfthpc.store.chunks import ChunkBuilder, PendingGroup
from rfthpc.store.layout import chunk_name, chunk_note, experience_doorbell, open_store, stream_key
from rfthpc.store.schema import Group, check_group


def new_stream_token() -> str:
    """A 16-hex-digit token unique to one writer process: start time (sortable) + randomness."""
    return f"{int(time.time()) & 0xFFFFFFFF:08x}{secrets.token_hex(4)}"


class ChunkWriter:
    """One explorer process's writer; each chunk file it commits has this writer for its whole life.

    `groups_per_chunk` groups make a chunk (fewer files on Lustre: ~1000/groups_per_chunk files
    per 1,000 groups); a chunk is also committed once its oldest group has waited
    `max_chunk_delay_s`, checked whenever `add` or `flush_if_due` is called.
    """

    def __init__(
        self,
        run_dir: Path,
        explorer: str,
        rank: int,
        groups_per_chunk: int = 64,
        max_chunk_delay_s: float = 5.0,
    ) -> None:
        self.explorer = check_name("explorer name", explorer)
        if not isinstance(rank, int) or rank < 0:
            raise UserError(f"explorer rank must be an integer >= 0, got {rank!r}")
        if groups_per_chunk < 1:
            raise UserError(f"groups_per_chunk must be >= 1, got {groups_per_chunk}")
        if max_chunk_delay_s < 0:
            raise UserError(f"max_chunk_delay_s must be >= 0, got {max_chunk_delay_s}")
        self.rank = rank
        self.groups_per_chunk = groups_per_chunk
        self.max_chunk_delay_s = max_chunk_delay_s
        self.store = open_store(run_dir, create=True)
        self.dir = make_dirs(self.store / explorer)
        self.token = new_stream_token()
        self.stream = stream_key(explorer, rank, self.token)
        self.seq = 0
        self.groups_added = 0
        self.groups_committed = 0
        self._chunk = ChunkBuilder(groups_per_chunk)
        self._first_buffered_at = 0.0
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def buffered(self) -> int:
        """Groups added but not yet committed."""
        return len(self._chunk)

    def add(self, group: Group) -> None:
        """Buffer `group` (validated now); commit a chunk when full or when the oldest group is too old.

        Everything the chunk needs is copied now: the caller may reuse the group and its arrays.
        """
        if self._closed:
            raise RuntimeError("ChunkWriter.add after close")
        if group.explorer != self.explorer or group.rank != self.rank:
            raise UserError(
                f"group of task {group.task_id!r} says explorer {group.explorer!r} rank {group.rank}, "
                f"but this writer is explorer {self.explorer!r} rank {self.rank}"
            )
        # The builder checks the token ids where it copies them (one pass over them, not two).
        experiences, info_json = check_group(group, check_ids=False)
        group_id = group.group_id or f"{self.explorer}/{self.rank}/{self.token}/{self.groups_added}"
        if not self._chunk:
            self._first_buffered_at = time.monotonic()
        self._chunk.add(PendingGroup(group, experiences, info_json), group_id)
        group.group_id = group_id
        self.groups_added += 1
        if len(self._chunk) >= self.groups_per_chunk:
            self.flush()
        else:
            self.flush_if_due()

    def flush_if_due(self) -> None:
        """Commit the buffer if its oldest group has waited `max_chunk_delay_s` (call this while idle)."""
        if self._chunk and time.monotonic() - self._first_buffered_at >= self.max_chunk_delay_s:
            self.flush()

    def flush(self) -> None:
        """Commit every buffered group as one chunk (atomic); a no-op when nothing is buffered.

        On failure (e.g. a full disk) nothing is published and the groups stay buffered.
        """
        if not self._chunk:
            return
        base = self.dir / f"c{self.rank:05d}-{self.token}-{self.seq:08d}.h5"
        tmp = temporary_name(base)
        attrs = {"explorer": self.explorer, "rank": self.rank, "stream": self.stream, "seq": self.seq}
        try:
            self._chunk.write(tmp, attrs)
            final = self.dir / chunk_name(self.rank, self.token, self.seq, time.time_ns(), len(self._chunk))
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        fsync_dir(self.dir)
        self.seq += 1
        self.groups_committed += len(self._chunk)
        self._chunk.clear()
        # Committed already: a ring that fails only lets the trainer find the chunk at its slow interval.
        with contextlib.suppress(OSError):
            experience_doorbell(self.store).ring(chunk_note(final, self.store))

    def close(self) -> None:
        """Commit what is buffered and stop accepting groups."""
        if not self._closed:
            self.flush()
            self._closed = True
