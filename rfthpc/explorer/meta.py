"""Progress of one explorer process: `explorer_meta/<name>/<rank>.json`, replaced atomically.

{"name", "rank", "state", "stage", "version", "steps", "groups_committed", "tasks_completed",
 "tokens_per_s", "evaluated_version", "host", "pid", "updated"}. A requeued process reads it back
to continue its step count and not repeat an evaluation.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from rfthpc.fsutil import read_json, write_json_atomic
from rfthpc.rundir import RunDir


def progress_path(run: RunDir, name: str, rank: int) -> Path:
    """Where explorer `name`, array task `rank`, records its progress."""
    return run.explorer_meta(name, rank)


class Progress:
    """The progress record of one explorer process."""

    def __init__(self, run: RunDir, name: str, rank: int) -> None:
        self.path = progress_path(run, name, rank)
        previous = read_json(self.path, {}) or {}
        self.data: dict[str, Any] = {
            "name": name,
            "rank": rank,
            "steps": int(previous.get("steps", 0)),
            "groups_committed": int(previous.get("groups_committed", 0)),
            "tasks_completed": int(previous.get("tasks_completed", 0)),
            "evaluated_version": previous.get("evaluated_version"),
        }

    def __getitem__(self, key: str) -> Any:
        return self.data.get(key)

    def update(self, **values: Any) -> None:
        """Set `values` and publish the record."""
        self.data.update(values)
        self.data.update(host=socket.gethostname(), pid=os.getpid(), updated=time.time())
        write_json_atomic(self.path, self.data)
