"""The filesystem a run directory is on, and what its mount options mean for hand-offs (rfthpc.sharedfs.mounts)."""

from __future__ import annotations

from pathlib import Path

from rfthpc.sharedfs.mounts import handoff_notes, mount_of, parse_mountinfo

MOUNTINFO = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:40 / /shared rw,relatime shared:20 - nfs4 srv:/export rw,vers=4.2,rsize=1048576,acregmin=3,acdirmax=60
41 22 0:41 / /shared/fast rw,relatime shared:21 - nfs4 srv:/fast rw,vers=4.2,lookupcache=positive
42 22 0:42 / /noac rw,relatime shared:22 - nfs srv:/x rw,noac,local_lock=flock
43 22 0:43 / /mnt/gluster rw,relatime shared:23 - fuse.glusterfs host:/v1 rw,user_id=0,group_id=0
44 22 0:44 / /lustre rw shared:24 - lustre mgs@tcp:/fs rw,localflock
45 22 0:45 / /gpfs rw shared:25 - gpfs gpfs1 rw
46 22 0:46 / /with\\040space rw shared:26 - fuse.glusterfs host:/v2 rw,negative-timeout=5
"""


def test_the_mount_of_a_path_is_its_deepest_mount_point() -> None:
    assert mount_of(Path("/shared/runs/p/n"), MOUNTINFO).fstype == "nfs4"
    assert mount_of(Path("/shared/fast/runs"), MOUNTINFO).options["lookupcache"] == "positive"
    assert mount_of(Path("/sharedx/runs"), MOUNTINFO).fstype == "ext4"
    assert mount_of(Path("/with space/runs"), MOUNTINFO).kind == "glusterfs"
    assert [m.kind for m in parse_mountinfo(MOUNTINFO)] == [
        "local", "nfs", "nfs", "nfs", "glusterfs", "lustre", "gpfs", "glusterfs"]


def test_options_that_delay_hand_offs_are_named_with_their_cost_and_fix() -> None:
    def notes(path: str, lock: str | None = None) -> list[str]:
        return handoff_notes(mount_of(Path(path), MOUNTINFO), lock)

    (nfs,) = notes("/shared/runs")
    assert "up to 60 s late" in nfs and "lookupcache=positive" in nfs
    assert notes("/shared/fast/runs") == []
    assert "round trip" in notes("/noac/runs")[0]
    assert notes("/mnt/gluster/runs") == []  # new names are seen at once with default options
    assert "up to 5 s late" in notes("/with space/runs")[0]
    assert notes("/lustre/runs") == [] and "node-local" in notes("/lustre/runs", "lockf")[0]
    assert "node-local on GPFS" in notes("/gpfs/runs", "flock")[0] and notes("/gpfs/runs", "link") == []
    assert notes("/shared/fast/runs", "flock") == []  # flock is a POSIX lock at the NFS server
    assert "local_lock=flock: filesystem.lock_type lockf is node-local" in notes("/noac/runs", "lockf")[1]
    assert notes("/work/runs", "flock") == []  # a local filesystem: one machine


def test_this_machines_mounts_are_read(tmp_path: Path) -> None:
    mount = mount_of(tmp_path / "not" / "made" / "yet")
    assert mount is not None and tmp_path.resolve().is_relative_to(mount.point)
