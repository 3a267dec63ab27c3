"""`rfthpc cancel RUN_DIR [--role trainer|explorer] [--name N]`: scancel the run's live jobs.

scancel sends SIGTERM first: the trainer saves a checkpoint and explorers release their task
claims (within the cluster's KillWait), so `rfthpc submit` of the same config resumes the run.
"""

from __future__ import annotations

from typing import Literal

from rfthpc.errors import SlurmError, UserError
from rfthpc.launch.job_states import live_jobs
from rfthpc.launch.slurmcli import first_line, run_slurm
from rfthpc.rundir.jobs import JobRecord, read_jobs
from rfthpc.rundir.paths import RunDir

CancelRole = Literal["all", "trainer", "explorer"]


def select_jobs(records: list[JobRecord], role: CancelRole, name: str | None) -> list[JobRecord]:
    """The submissions `cancel` targets; explorers inside a heterogeneous job cannot be cancelled alone."""
    if role == "all":
        return [r for r in records if name is None or name in r.explorer_names()]
    if role == "trainer":
        return [r for r in records if r.runs_trainer()]
    chosen = [r for r in records if r.role == "explorer" and (name is None or r.explorer == name)]
    het = [r for r in records if r.role in ("hetjob", "colocated") and (name is None or r.explorer == name)]
    if het and not chosen:
        raise UserError(
            f"the explorers {'named ' + repr(name) + ' ' if name else ''}run inside "
            f"{'heterogeneous' if het[0].role == 'hetjob' else 'colocated'} job "
            f"{het[0].job_id} together with the trainer and cannot be cancelled alone; cancel the whole run "
            "(`rfthpc cancel RUN_DIR`), or add separate explorers with `rfthpc add-explorers`"
        )
    if name is not None and not chosen:
        known = sorted({n for r in records for n in r.explorer_names()})
        raise UserError(f"no explorer array named {name!r} in this run; its explorers: {', '.join(known) or 'none'}")
    return chosen


def cancel_jobs(run_dir: RunDir, role: CancelRole = "all", name: str | None = None) -> list[str]:
    """scancel the live jobs of the run selected by `role` / `name`; return their ids."""
    records = read_jobs(run_dir)
    if not records:
        raise UserError(f"{run_dir.root} has no jobs.jsonl: no Slurm job was submitted for this run")
    chosen = select_jobs(records, role, name)
    live, _ = live_jobs(chosen)
    ids = [r.job_id for r in live]
    if ids:
        done = run_slurm(["scancel", *ids], check=False)
        errors = [ln for ln in done.stderr.splitlines() if ln.strip() and "already completing or completed" not in ln]
        if done.returncode != 0 and errors:
            raise SlurmError(f"scancel {' '.join(ids)} failed: {first_line(chr(10).join(errors))}")
    return ids
