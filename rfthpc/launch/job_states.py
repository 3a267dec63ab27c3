"""The Slurm states of a run's jobs, asked with timeouts: what `rfthpc status`, `submit` and `cancel` see.

sacct is asked first (it knows finished jobs), then squeue for the jobs it does not know; a job
neither knows is `GONE`. A Slurm that does not answer gives an error text, never a hang.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rfthpc.errors import SlurmError
from rfthpc.launch.slurmcli import first_line, run_slurm
from rfthpc.rundir.jobs import JobRecord

STATE_TIMEOUT_S = 15.0
"""Seconds to wait for sacct or squeue."""

# Slurm states after which a job does nothing more (REQUEUED, PREEMPTED and SUSPENDED may continue);
# GONE is rfthpc's own, for a job neither sacct nor squeue knows.
TERMINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT",
    "REVOKED", "GONE",
})


@dataclass
class TaskState:
    """The Slurm state of one job, array task (`<id>_<k>`) or hetjob component (`<id>+<k>`)."""

    job_id: str
    state: str
    elapsed: str = ""
    nodes: str = ""
    reason: str = ""

    @property
    def terminal(self) -> bool:
        """True once the task is finished for good (completed, failed, cancelled, ...)."""
        return self.state in TERMINAL_STATES


def _main_id(job_id: str) -> str:
    return job_id.split("_", 1)[0].split("+", 1)[0]


def _rows(stdout: str, states: dict[str, list[TaskState]]) -> None:
    """Add `JobID|State|Elapsed|NodeList|Reason` lines to `states` (a state like `CANCELLED by 0` → CANCELLED)."""
    for line in stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and _main_id(parts[0]) in states:
            reason = "" if parts[4] in ("None", "(null)") else parts[4]
            state = parts[1].split()[0] if parts[1].strip() else "UNKNOWN"
            states[_main_id(parts[0])].append(TaskState(parts[0], state, parts[2], parts[3], reason))


def query_states(
    job_ids: Sequence[str], timeout_s: float = STATE_TIMEOUT_S
) -> tuple[dict[str, list[TaskState]], str | None]:
    """States of jobs by id (each with its array tasks / components), and an error text if Slurm did not answer.

    sacct is asked first (it knows finished jobs); jobs it does not know (no accounting, or not
    recorded yet) are looked up in squeue, and a job neither knows is `GONE`.
    """
    states: dict[str, list[TaskState]] = {j: [] for j in job_ids}
    if not job_ids:
        return states, None
    sacct_error = ""
    try:
        done = run_slurm(["sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o",
                          "JobID,State,Elapsed,NodeList,Reason"], timeout_s=timeout_s, check=False)
        if done.returncode == 0:
            _rows(done.stdout, states)
        else:
            sacct_error = first_line(done.stderr)
    except SlurmError as e:
        # Only the accounting database may be down (its "connection refused"): squeue still answers.
        sacct_error = str(e)
    unknown = [j for j, tasks in states.items() if not tasks]
    if not unknown:
        return states, None
    try:
        done = run_slurm(["squeue", "-h", "-j", ",".join(unknown), "-o", "%i|%T|%M|%N|%r"],
                         timeout_s=timeout_s, check=False)
    except SlurmError as e:
        return states, f"{e} (sacct: {sacct_error})" if sacct_error else str(e)
    # squeue fails with "Invalid job id" when none of the jobs is queued any more.
    if done.returncode != 0 and "invalid job id" not in done.stderr.lower():
        return states, f"sacct: {sacct_error or 'no record'}; squeue: {first_line(done.stderr)}"
    if done.returncode == 0:
        _rows(done.stdout, states)
    # squeue lists every job not yet finished: one it does not list is over, even if sacct could not say how.
    why = f"not queued; sacct: {sacct_error}" if sacct_error else "neither sacct nor squeue knows it"
    for job_id in unknown:
        if not states[job_id]:
            states[job_id].append(TaskState(job_id, "GONE", reason=why))
    return states, None


def live_jobs(records: Sequence[JobRecord], timeout_s: float = STATE_TIMEOUT_S) -> tuple[list[JobRecord], str | None]:
    """The records whose job still has a task that is not finished (unknown states count as live)."""
    states, error = query_states([r.job_id for r in records], timeout_s)
    if error is not None:
        return list(records), error
    return [r for r in records if any(not t.terminal for t in states[r.job_id])], None
