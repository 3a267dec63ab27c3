"""`jobs.jsonl`: one line per Slurm submission of a run (role, explorer name, job id, array size, time).

Several submitters may append at once (`rfthpc submit` of an asynchronous pair, `add-explorers`),
so appends hold the run's lock for `jobs.jsonl`; readers skip a torn last line.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import append_line
from rfthpc.sharedfs.locks import DEFAULT_LOCK_KIND, LockKind, make_lock

JobRole = Literal["trainer", "explorer", "hetjob", "colocated", "server"]


@dataclass
class JobRecord:
    """One submission: a trainer job, an explorer array, a heterogeneous job holding both, or the server
    array of a shared auxiliary model."""

    role: JobRole
    """trainer, explorer (an array), hetjob (trainer + explorers in one allocation), colocated (trainer +
    explorers in one job on one node, sharing its GPUs) or server (an array, one task per engine of a shared
    auxiliary model)."""
    job_id: str
    """Slurm job id (of the array, or of the heterogeneous job's leader)."""
    explorer: str | None = None
    """Explorer name (explorer arrays and hetjobs)."""
    array_size: int = 0
    """Explorer array tasks (or explorer tasks of a hetjob; a server array's engines)."""
    server: str | None = None
    """The auxiliary model a server array serves."""
    trainer_nodes: int = 0
    """Trainer nodes (trainer jobs and hetjobs)."""
    script: str = ""
    """The sbatch script as submitted (under `slurm/` in the run directory)."""
    log_dir: str = ""
    """Folder of the job's logs (`log/<job id>...`)."""
    time: float = field(default_factory=time.time)
    """Unix time of the submission."""
    submitted_by: str = ""
    """Which command submitted it (submit, add-explorers)."""

    def explorer_names(self) -> list[str]:
        """Explorer names this job runs (none for a trainer job)."""
        return [self.explorer] if self.explorer and self.role in ("explorer", "hetjob", "colocated") else []

    def runs_trainer(self) -> bool:
        """True for the trainer job, a hetjob and a colocated job."""
        return self.role in ("trainer", "hetjob", "colocated")


def record_job(run_dir: RunDir, record: JobRecord, lock_kind: LockKind = DEFAULT_LOCK_KIND) -> None:
    """Append `record` to the run's jobs.jsonl under the run's lock for it."""
    with make_lock(run_dir.slurm / "jobs.lock", kind=lock_kind, timeout_s=60.0, stale_s=30.0):
        append_line(run_dir.jobs, json.dumps(dataclasses.asdict(record), sort_keys=True))


def read_jobs(run_dir: RunDir) -> list[JobRecord]:
    """The run's submissions in order (a torn or unknown line is skipped)."""
    try:
        lines = run_dir.jobs.read_text().splitlines()
    except FileNotFoundError:
        return []
    names = {f.name for f in dataclasses.fields(JobRecord)}
    records = []
    for line in lines:
        try:
            raw: dict[str, Any] = json.loads(line)
            records.append(JobRecord(**{k: v for k, v in raw.items() if k in names}))
        except (json.JSONDecodeError, TypeError):
            continue
    return records
