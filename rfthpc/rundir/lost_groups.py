"""The groups the trainer lost, per claim set: `experiences/_reader/losses.json`.

The trainer's store reader (`rfthpc.store.reader.StoreReader.track_tasksets`) is the only writer;
explorers' claim sets (`rfthpc.tasks.claims`) read it to hand out a fresh task for each group lost
(dropped as stale, or quarantined), so the trainer still gets its groups per step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rfthpc.rundir.paths import READER_DIR
from rfthpc.sharedfs.fileops import make_dirs, read_json, write_json_atomic

LOSSES_FILE = "losses.json"


LOSSES_FORMAT = 1


def read_losses(store: Path) -> dict[str, int] | None:
    """{claim set: groups lost} the trainer reports for the claim sets it consumes (`StoreReader.
    track_tasksets`), or None when no trainer reports (no file, or an unreadable one)."""
    try:
        data = read_json(store / READER_DIR / LOSSES_FILE)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != LOSSES_FORMAT or not isinstance(data.get("lost"), dict):
        return None
    return {str(k): int(v) for k, v in data["lost"].items()}


def write_losses(store: Path, lost: Mapping[str, int]) -> None:
    """Publish the groups lost per claim set (the trainer's reader is the only writer)."""
    make_dirs(store / READER_DIR)
    write_json_atomic(store / READER_DIR / LOSSES_FILE, {"format": LOSSES_FORMAT, "lost": dict(sorted(lost.items()))})
