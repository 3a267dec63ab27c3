"""Run-directory records as the tests read them: by field name, as the roles wrote them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import REPORTS_KEPT, read_trainer_meta
from rfthpc.sharedfs.journal import journal_at


def trainer_report(run_dir: Path | RunDir) -> dict[str, Any] | None:
    """The trainer's newest report (`trainer_meta/`) as a dict; None before it wrote one."""
    meta = read_trainer_meta(run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir))
    return None if meta is None else dataclasses.asdict(meta)


def write_trainer_report(run_dir: Path | RunDir, report: dict[str, Any]) -> None:
    """Append `report` to `trainer_meta/` as it is (no host, pid or time stamped in, unlike the trainer's)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    journal_at(run.trainer_meta, keep=REPORTS_KEPT).append(json.dumps(report).encode())
