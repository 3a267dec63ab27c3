"""Which filesystem a run directory lives on, and what its mount options mean for hand-offs.

Roles hand things to each other by new names (`rfthpc.sharedfs.journal`), which a network
filesystem's other clients see at once with most options; a few options still delay them, or make
a lock kind node-local. `mount_of` reads the mount from /proc/self/mountinfo (as vLLM does to decide
how to read weights), and `handoff_notes` says what its options imply, in the words `rfthpc status`
and the roles' logs use. Nothing here changes a mount: users cannot, and rfthpc need not, retune
their cluster's filesystem.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")

LOCAL_TYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "f2fs", "jfs", "reiserfs"})
"""Filesystems of one machine (every role of a run on them runs on that machine)."""
NFS_DEFAULT_ACDIRMAX_S = 60
"""NFS's default longest attribute cache time of a directory (`acdirmax`)."""


@dataclass(frozen=True)
class Mount:
    """One mounted filesystem."""

    point: Path
    fstype: str
    """As the kernel names it: nfs4, lustre, gpfs, fuse.glusterfs, beegfs, ext4, ..."""
    source: str
    options: dict[str, str | None] = field(default_factory=dict)
    """The mount's options and its superblock's (`actimeo=30` -> {"actimeo": "30"}, `noac` -> {"noac": None})."""

    @property
    def kind(self) -> str:
        """The filesystem family: nfs, lustre, gpfs, glusterfs, beegfs, cephfs, local, or the type itself."""
        t = self.fstype
        if t.startswith("nfs"):
            return "nfs"
        if t in ("fuse.glusterfs", "glusterfs"):
            return "glusterfs"
        if t in ("ceph", "fuse.ceph-fuse"):
            return "cephfs"
        if t in LOCAL_TYPES:
            return "local"
        return t


def _unescape(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _options(*texts: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for text in texts:
        for item in text.split(","):
            if item:
                key, eq, value = item.partition("=")
                out[key] = value if eq else None
    return out


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts listed in /proc/self/mountinfo's format."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 6 or len(rest) < 2:
            continue
        mounts.append(Mount(Path(_unescape(fields[4])), rest[0], _unescape(rest[1]),
                            _options(fields[5], rest[2] if len(rest) > 2 else "")))
    return mounts


def mount_of(path: Path, mountinfo: str | None = None) -> Mount | None:
    """The mount `path` lives on (it need not exist yet), or None where that cannot be told."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None
    p = Path(os.path.realpath(path))  # symbolic links resolved where they exist; the rest as written
    best: Mount | None = None
    for m in parse_mountinfo(mountinfo):
        if (p == m.point or m.point in p.parents) and (best is None or len(m.point.parts) >= len(best.point.parts)):
            best = m
    return best


def _seconds(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def handoff_notes(mount: Mount, lock_kind: str | None = None) -> list[str]:
    """What `mount`'s type and options mean for a run directory on it (empty when nothing delays
    hand-offs between nodes), and for `lock_kind` (`filesystem.lock_type`) when given."""
    o, kind = mount.options, mount.kind
    notes = []
    if kind == "nfs":
        if "noac" in o or o.get("actimeo") == "0":
            notes.append("NFS mounted with noac (or actimeo=0): every look at the run directory goes to the server; "
                         "hand-offs are prompt, but each costs a round trip")
        elif o.get("lookupcache", "all") == "all":
            acdirmax = _seconds(o.get("acdirmax")) or _seconds(o.get("actimeo")) or NFS_DEFAULT_ACDIRMAX_S
            notes.append(f"NFS caches directory lookups (lookupcache=all, acdirmax {acdirmax:.0f} s): a hand-off "
                         f"made on another node may be noticed up to {acdirmax:.0f} s late; mount with "
                         "lookupcache=positive (or ask for actimeo=1) for prompt hand-offs")
        # Linux's NFS client takes flock as a POSIX lock at the server (since 2.6.12): both kinds exclude
        # across clients unless the mount keeps locks local.
        local = o.get("local_lock") in ("all", "flock", "posix") or "nolock" in o
        if lock_kind in ("flock", "lockf") and local:
            notes.append(f"NFS mounted with {'nolock' if 'nolock' in o else 'local_lock=' + str(o['local_lock'])}: "
                         f"filesystem.lock_type {lock_kind} is node-local; use link (the default)")
    elif kind == "glusterfs":
        negative = _seconds(o.get("negative-timeout")) or _seconds(o.get("negative_timeout"))
        if negative:
            notes.append(f"GlusterFS mounted with negative-timeout={negative:g}: a new name made on another node may "
                         f"be noticed up to {negative:g} s late; mount without it for prompt hand-offs")
    elif kind == "lustre":
        if "localflock" in o and lock_kind in ("flock", "lockf"):
            notes.append(f"Lustre mounted with localflock: filesystem.lock_type {lock_kind} is node-local; "
                         "use link (the default)")
        if "noflock" in o and lock_kind in ("flock", "lockf"):
            notes.append(f"Lustre mounted with noflock: filesystem.lock_type {lock_kind} is not supported; "
                         "use link (the default)")
    elif kind == "gpfs" and lock_kind == "flock":
        notes.append("filesystem.lock_type flock is node-local on GPFS; use link (the default) or lockf")
    return notes


def describe(path: Path, lock_kind: str | None = None) -> tuple[str, list[str]]:
    """("<type> at <mount point>", notes) of the filesystem `path` lives on, for `rfthpc status` and logs."""
    mount = mount_of(path)
    if mount is None:
        return "unknown filesystem", []
    return f"{mount.fstype} at {mount.point}", handoff_notes(mount, lock_kind)


def log_filesystem(path: Path, lock_kind: str | None, log: logging.Logger) -> None:
    """Log which filesystem the run directory `path` is on, and each note on its options as a warning
    (a role does it once as it starts)."""
    where, notes = describe(path, lock_kind)
    log.info("run directory %s on %s", path, where)
    for note in notes:
        log.warning("run directory %s: %s", path, note)
