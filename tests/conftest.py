"""Fixtures shared by the Slurm test directories: the local cluster, cleared of jobs that dead test
sessions left behind, and the shared filesystem its nodes are clients of.

A test session that is killed (SIGKILL, a machine restart) never runs its teardown, so its jobs stay
queued or running until their time limit and hold the small local cluster's CPUs and memory: the
next session's multi-node jobs then pend for minutes. Each session's pid is recorded in its pytest
base directory; jobs whose output lies in another session's directory whose pytest is gone are
cancelled before any test submits. A concurrent live session's jobs are left alone.

The cluster runs with a shared filesystem (RFTHPC_SHARED_FS=1, tools/local_slurm.sh): a GlusterFS volume
mounted at the same path on the host and, through a FUSE client of its own, on every node, as on a
cluster. Tests whose roles must hand things over between nodes put their run directories there
(`shared_dir`) and start processes on chosen nodes (`on_node`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The suite proves the CPU path in float32: its tolerances are float32's, its runs publish float32 snapshots, and
# its multi-rank tests put every rank on one machine. On a machine with GPUs, the GPU path (bf16, CUDA, FSDP2) is
# checked by tools/gpu_check.sh instead; the suite keeps to the CPU there too (set before anything imports torch,
# and inherited by every process a test starts).
os.environ["CUDA_VISIBLE_DEVICES"] = ""
# The local cluster's nodes are each a client of one shared filesystem (tools/local_slurm.sh); inherited
# by the `local_slurm.sh` calls below. Set to 0, the tests that need the shared filesystem fail and say so.
os.environ.setdefault("RFTHPC_SHARED_FS", "1")

LOCAL_SLURM = Path(__file__).resolve().parents[1] / "tools" / "local_slurm.sh"
SHARED_MOUNT = Path(os.environ.get("RFTHPC_SHARED_FS_MOUNT", "/mnt/rfthpc-shared"))
SLURM_PIDS = Path(os.environ.get("RFTHPC_SLURM_DIR", "/tmp/rfthpc-slurm")) / "pids"
NODES = ("n1", "n2", "n3")
SESSION_PID_FILE = "rfthpc-test-session.pid"
_ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
          "TIMEOUT"}
_SESSION_DIR = re.compile(r"pytest-\d+")


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)


def queued_jobs() -> dict[str, str]:
    """Every job Slurm lists that has not ended → the path its standard output goes to.

    Keys are what `scancel` takes for the whole job: the array job id for an array task, the leader
    id for a heterogeneous job's component.
    """
    jobs: dict[str, str] = {}
    for line in _run("scontrol", "show", "job", "-o").stdout.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        job = fields.get("HetJobId") or fields.get("ArrayJobId") or fields.get("JobId")
        if job and fields.get("StdOut") and fields.get("JobState") not in _ENDED:
            jobs[job] = fields["StdOut"]
    return jobs


def _started_at(pid: int) -> float:
    """When process `pid` started (seconds since the epoch), from /proc."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _session_alive(session: Path) -> bool:
    """True while the pytest process owning the base directory `session` runs.

    The owner's pid is in our own record and in the `.lock` pytest itself keeps there until its
    process exits (the latter also covers sessions of checkouts older than this fixture). A process
    that started after the record was written only reuses the pid (after a restart, say).
    """
    for record in (session / SESSION_PID_FILE, session / ".lock"):
        try:
            pid = int(record.read_text())
            if (b"pytest" in Path(f"/proc/{pid}/cmdline").read_bytes()
                    and _started_at(pid) <= record.stat().st_mtime + 1):
                return True
        except (OSError, ValueError):
            continue
    return False


def orphaned_jobs(basetemp: Path, jobs: dict[str, str]) -> list[str]:
    """The jobs of `jobs` (id → output path) written into another pytest session's base directory
    (a sibling `pytest-N` of `basetemp`) whose pytest process is gone."""
    root = basetemp.parent
    if not root.name.startswith("pytest-of-"):
        return []  # a custom --basetemp: no way to tell test sessions from anything else
    orphans = []
    for job, stdout in jobs.items():
        try:
            session = root / Path(stdout).relative_to(root).parts[0]
        except (ValueError, IndexError):
            continue
        if _SESSION_DIR.fullmatch(session.name) and session != basetemp and not _session_alive(session):
            orphans.append(job)
    return orphans


def cancel(*job_ids: str, timeout: float = 60) -> None:
    """scancel jobs, again while Slurm still lists them (a job caught in a requeue can come back), until
    they are gone and their resources free, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while job_ids and time.monotonic() < deadline:
        _run("scancel", *job_ids)
        time.sleep(1)
        if not _run("squeue", "-h", "-j", ",".join(job_ids), "-o", "%i").stdout.strip():
            return


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The local cluster, brought up if it is not healthy, without jobs of dead test sessions."""
    if _run("bash", str(LOCAL_SLURM), "status").returncode != 0:
        if os.geteuid() != 0:
            pytest.fail(f"no healthy local Slurm and not root: run `sudo {LOCAL_SLURM} up` first")
        # From a bare machine this installs packages (~40 s); allow for a slow mirror.
        up = _run("bash", str(LOCAL_SLURM), "up", timeout=900)
        assert up.returncode == 0, f"local_slurm.sh up failed:\n{up.stdout}\n{up.stderr}"
    basetemp = tmp_path_factory.getbasetemp()
    (basetemp / SESSION_PID_FILE).write_text(str(os.getpid()))
    orphans = orphaned_jobs(basetemp, queued_jobs())
    if orphans:
        print(f"cancelling jobs left by dead test sessions: {', '.join(orphans)}", file=sys.stderr)
        cancel(*orphans)


@pytest.fixture(scope="session")
def shared_fs(slurm_cluster: None) -> Path:
    """The shared filesystem's mount point, the same path on the host and on every node of the cluster."""
    from rfthpc.sharedfs.mounts import mount_of

    if os.environ.get("RFTHPC_SHARED_FS") != "1":
        pytest.fail("RFTHPC_SHARED_FS is not 1: this test runs its roles on different clients of the shared "
                    "filesystem; unset it (tools/test.sh and the test session set it)")
    mount = mount_of(SHARED_MOUNT)
    if mount is None or mount.point != SHARED_MOUNT or not mount.fstype.startswith("fuse.glusterfs"):
        pytest.fail(f"{SHARED_MOUNT} is not a GlusterFS mount (found {mount}): run `tools/local_slurm.sh up` "
                    "with RFTHPC_SHARED_FS=1 (see tools/shared_fs.sh)")
    return SHARED_MOUNT


def node_pid(node: str) -> int:
    """The pid of node `node`'s slurmd (its mount namespace holds the node's own filesystem client)."""
    return int((SLURM_PIDS / f"slurmd-{node}.pid").read_text())


def on_node(node: str, argv: list[str], cwd: Path | None = None) -> list[str]:
    """`argv` run as if on node `node`: in its slurmd's mount namespace, so through its own client of the
    shared filesystem (the process keeps our pid namespace: its pid can be signalled from here)."""
    wd = cwd or Path.cwd()
    return ["nsenter", f"--mount=/proc/{node_pid(node)}/ns/mnt", f"--wd={wd}", "--", *argv]


@pytest.fixture(scope="session")
def node_clients(shared_fs: Path) -> dict[str, int]:
    """Every node → the device number its client of the shared filesystem has there: distinct clients."""
    devices = {}
    for node in NODES:
        out = subprocess.run(on_node(node, ["stat", "-c", "%d", str(shared_fs)]), capture_output=True, text=True,
                             timeout=60, check=False)
        if out.returncode != 0:
            pytest.fail(f"cannot enter node {node}'s mount namespace: {out.stderr.strip()}")
        devices[node] = int(out.stdout)
    if len(set(devices.values()) | {shared_fs.stat().st_dev}) != len(NODES) + 1:
        pytest.fail(f"the nodes do not each have a client of their own of {shared_fs}: devices {devices}, host "
                    f"{shared_fs.stat().st_dev}; restart the cluster: "
                    "`tools/local_slurm.sh down; tools/local_slurm.sh up`")
    return devices


@pytest.fixture
def shared_dir(shared_fs: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A directory of this test's own on the shared filesystem, removed afterwards."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:80]
    path = shared_fs / "pytest" / f"{os.getpid()}-{name}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def agentscope_python() -> str:
    """An interpreter with AgentScope 1.x (`.venv-agentscope`, made by tools/setup_agentscope.sh on first use:
    AgentScope 1.0.21 and vLLM cannot share one environment)."""
    script = Path(__file__).resolve().parents[1] / "tools" / "setup_agentscope.sh"
    done = _run("bash", str(script), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]
