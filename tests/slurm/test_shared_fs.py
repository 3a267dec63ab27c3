"""The local cluster's shared filesystem: every node a client of its own, and rfthpc's hand-offs crossing
between them (tools/shared_fs.sh, tools/local_slurm.sh with RFTHPC_SHARED_FS=1).

Each test starts small programs on chosen nodes (`on_node`: the node slurmd's mount namespace, so its
own FUSE client) and checks what one node wrote is read on another. Waits are bounded but generous:
a busy machine delays the programs, never the filesystem's caches.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rfthpc.sharedfs.mounts import describe
from tests.conftest import NODES, on_node

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


def py_on(node: str, code: str, *args: str) -> str:
    """Run Python `code` (with `args` in sys.argv[1:]) on `node`; its standard output."""
    out = subprocess.run(on_node(node, [sys.executable, "-c", code, *args], cwd=REPO), capture_output=True,
                         text=True, timeout=120, check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, f"on {node}: {out.stderr}"
    return out.stdout


def test_every_node_is_a_client_of_its_own(node_clients: dict[str, int], shared_fs: Path) -> None:
    """n1-n3 and the host each mount the volume through a FUSE client of their own, at the same path."""
    assert sorted(node_clients) == list(NODES)
    assert len(set(node_clients.values()) | {shared_fs.stat().st_dev}) == len(NODES) + 1
    where, notes = describe(shared_fs)
    assert where == f"fuse.glusterfs at {shared_fs}" and notes == []


def test_a_file_written_on_one_node_is_read_whole_on_another(node_clients: dict[str, int], shared_dir: Path) -> None:
    """A new name made on n1 (write, fsync, rename) is found by name on n2, complete."""
    target = shared_dir / "hello.json"
    # n2 looks first, so its client has the name's absence cached if it caches one.
    assert py_on("n2", "import os, sys; print(os.path.exists(sys.argv[1]))", str(target)).strip() == "False"
    py_on("n1", "from pathlib import Path; import sys\n"
                "from rfthpc.sharedfs.fileops import write_json_atomic\n"
                "write_json_atomic(Path(sys.argv[1]), {'payload': 'x' * 100000})", str(target))
    seen = json.loads(py_on("n2", "import sys; print(open(sys.argv[1]).read())", str(target)))
    assert seen == {"payload": "x" * 100000}


def test_journal_entries_and_doorbells_cross_nodes(node_clients: dict[str, int], shared_dir: Path) -> None:
    """Entries appended on n1 and n3 (a compare-and-swap each) are all read, in order, on n2; a waiter on
    n2 wakes for a doorbell rung on n1 and reads its note (a ring is made under its name before its note is
    written, so a waiter that finds it at once may read it empty first: readers then list instead). (How soon is tools/bench_handoff.py's figure:
    on a busy machine the programs' scheduling, not the filesystem, sets the delay.)"""
    journal = shared_dir / "journal"
    read = ("from pathlib import Path; import sys\nfrom rfthpc.sharedfs.journal import Journal\n"
            "j = Journal(Path(sys.argv[1]))\nn, data = j.latest()\nprint(n, (data or b'').decode())")
    append = ("from pathlib import Path; import sys\nfrom rfthpc.sharedfs.journal import Journal\n"
              "j = Journal(Path(sys.argv[1]))\nn, _ = j.latest()\nprint(j.append(sys.argv[2].encode(), expect=n + 1))")
    assert py_on("n2", read, str(journal)).split() == ["0"]
    for i, node in enumerate(["n1", "n3", "n1", "n3"], start=1):
        assert py_on(node, append, str(journal), f"entry-{i}").strip() == str(i)
        assert py_on("n2", read, str(journal)).split() == [str(i), f"entry-{i}"]

    bell = shared_dir / "bell"
    ready, rung = shared_dir / "waiting", shared_dir / "rung"
    waiter = subprocess.Popen(
        on_node("n2", [sys.executable, "-c",
                       "from pathlib import Path; import sys, time\n"
                       "from rfthpc.sharedfs.handoff import Doorbell, Waiter\n"
                       "bell = Doorbell(Path(sys.argv[1]))\n"
                       "Path(sys.argv[2]).write_text('')\n"
                       "got = Waiter().wait(lambda: [n for n in bell.notes_after(0)[1] if n] or None, [bell], 120)\n"
                       "print(time.time(), got)",
                       str(bell), str(ready)], cwd=REPO),
        stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and waiter.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the waiter on n2 did not start"
        time.sleep(1.5)  # past the volume's metadata cache period: a changed file would now look unchanged
        py_on("n1", "from pathlib import Path; import sys, time\nfrom rfthpc.sharedfs.handoff import Doorbell\n"
                    "Doorbell(Path(sys.argv[1])).ring(b'v1')\nPath(sys.argv[2]).write_text(repr(time.time()))",
              str(bell), str(rung))
        out, _ = waiter.communicate(timeout=150)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    woke_at, got = out.split(maxsplit=1)
    assert got.strip() == "[b'v1']"
    assert float(woke_at) - float(rung.read_text()) < 120


def test_roles_starting_together_on_three_nodes_make_one_store(node_clients: dict[str, int],
                                                               shared_dir: Path) -> None:
    """Explorers and the trainer create the experience store when they start, often in the same second
    on different nodes: of the processes racing on each of 30 new run directories, every one opens the
    store, and its marker is the one all of them read (none is replaced under another node's feet)."""
    runs = [shared_dir / f"run{i:02d}" for i in range(30)]
    for run in runs:
        run.mkdir()
        (run / "config.yaml").write_text("{}\n")
    go = shared_dir / "go"
    opener = ("from pathlib import Path; import sys, time\n"
              "from rfthpc.store.layout import open_store\n"
              "go = Path(sys.argv[1])\n"
              "while not go.exists():\n    time.sleep(0.002)\n"
              "for run in sys.argv[2:]:\n    open_store(Path(run), create=True)\n"
              "print('ok')")
    procs = [subprocess.Popen(on_node(node, [sys.executable, "-c", opener, str(go), *map(str, runs)], cwd=REPO),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
             for node in [*NODES, *NODES]]
    time.sleep(3)  # every opener imported and polling, whatever the machine's load
    go.write_text("")
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0 and out.strip() == "ok", err
    for run in runs:
        assert json.loads((run / "experiences" / "STORE.json").read_text())["format"] == "rfthpc-experience-store"
        assert [p.name for p in (run / "experiences").iterdir()] == ["STORE.json"]
