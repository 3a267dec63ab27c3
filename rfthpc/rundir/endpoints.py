"""`endpoints/`: where each explorer process serves its policy to agents (`agent_workflow` and the AgentScope
workflows), one file per process.

`endpoints/<explorer>_<rank>_<host>_<pid>.json` = {"url", "host", "explorer", "rank", "pid", "started"}, made
once under a name of its own when the endpoint starts (a new name: every node sees it at once) and removed
when the process ends cleanly; a file whose process is gone (killed, preempted) says so by its host and pid.
The URL is on the node's loopback, where the process's agents run. The endpoint's key is not published:
only the episodes the process starts are given it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import make_dirs, write_once


def publish_endpoint(run_dir: Path, explorer: str, rank: int, url: str) -> Path:
    """Record that this process serves its policy at `url`; the file's path (to `withdraw_endpoint`)."""
    host = socket.gethostname()
    folder = RunDir(run_dir).endpoints
    make_dirs(folder)
    path = folder / f"{explorer}_{rank}_{host}_{os.getpid()}.json"
    record = {"url": url, "host": host, "explorer": explorer, "rank": rank, "pid": os.getpid(),
              "started": time.time()}
    write_once(path, json.dumps(record).encode())
    return path


def withdraw_endpoint(path: Path) -> None:
    """Remove a published endpoint (its process is ending)."""
    path.unlink(missing_ok=True)


def read_endpoints(run_dir: Path) -> list[dict[str, Any]]:
    """The endpoints published in a run directory, oldest first (a record half-written is skipped)."""
    found = []
    folder = RunDir(run_dir).endpoints
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda r: r.get("started", 0))
