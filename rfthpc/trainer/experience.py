"""The RL stages' input on rank 0: batches of experience groups from the store, or "not yet",
or "no more" (the explorers' tasks are done and less than a batch is left), or a timeout.

The stage's `total_steps` is the contract: the reader reports every group it drops as stale for
the stage's claim sets, and their explorers explore a fresh task in its place (`TaskClaims`). "No
more" therefore means the tasksets' epochs ran out (or the explorers' budget did, when the trainer
needs more groups per step than the explorers make), and the log line says which.

The wait for a batch is cut into short polls so that the training loop can react to a stop
signal in between; `buffer.trainer_input.experience_buffer.max_read_timeout` bounds the whole wait.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rfthpc.rundir.paths import RunDir
from rfthpc.store import Group, StoreReader, StoreTimeout
from rfthpc.tasks.claims import ClaimsStatus, TaskClaims
from rfthpc.trainer.samples import Sample, samples_from_groups


def data_finished(run_dir: Path, names: list[str], losses: dict[str, int]) -> list[ClaimsStatus] | None:
    """The claim sets `names` if every one is finished (no task left to hand out, none claimed), else None.

    `losses` are the groups of each the trainer dropped: a claim set is finished only once the fresh
    tasks replacing them were handed out too (or its epochs ran out), so the trainer does not give
    up before the explorers have acted on its latest drops.
    """
    statuses = [TaskClaims.read_status(run_dir, name, lost=losses.get(name, 0)) for name in names]
    if not statuses or not all(st is not None and st.finished for st in statuses):
        return None
    return [st for st in statuses if st is not None]


def _why_finished(statuses: list[ClaimsStatus]) -> str:
    def one(st: ClaimsStatus) -> str:
        if st.exhausted:
            return f"taskset {st.taskset!r} was explored for all its {st.total_epochs} epoch(s)"
        return (f"taskset {st.taskset!r} did all its {st.issued} tasks (total_steps x batch_size = {st.max_tasks}, "
                f"plus {st.refill} replacing groups dropped as stale or tasks that gave none)")

    exhausted = all(st.exhausted for st in statuses)
    lead = "the data ran out" if exhausted else "the explorers did every task they were given"
    return f"{lead}: {', '.join(one(st) for st in statuses)}"


@dataclass
class Poll:
    """What one poll of the store found."""

    status: str
    """batch | wait | exhausted | timeout | stop"""
    samples: list[Sample] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    message: str = ""


class ExperienceSource:
    """Batches of `n_groups` groups for the trainer, checked and turned into samples (rank 0 only)."""

    def __init__(
        self,
        run_dir: Path,
        reader: StoreReader,
        n_groups: int,
        claim_sets: list[str],
        *,
        vocab_size: int,
        max_length: int | None,
        temperature: float,
        timeout_s: float,
        poll_s: float,
        grace_s: float,
    ) -> None:
        """`claim_sets`: the `TaskClaims` names of the stage's tasksets, whose lost groups the
        explorers replace. `grace_s`: once the tasks are done, how long to wait for chunks still
        being committed."""
        self.run_dir = Path(run_dir)
        self.reader = reader
        self.n_groups = n_groups
        self.claim_sets = claim_sets
        reader.track_tasksets(claim_sets)
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.temperature = temperature
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.grace_s = grace_s
        self._waiting_since: float | None = None
        self._done_since: float | None = None

    def poll(self, current_version: int) -> Poll:
        """Try for one batch for a trainer holding policy `current_version`, for about `poll_s`."""
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        try:
            groups = self.reader.take(self.n_groups, current_version, timeout_s=self.poll_s)
        except StoreTimeout:
            return self._no_batch(time.monotonic())
        self._waiting_since = self._done_since = None
        samples = samples_from_groups(groups, self.vocab_size, self.max_length, self.temperature)
        return Poll("batch", samples, groups)

    def _no_batch(self, now: float) -> Poll:
        finished = data_finished(self.run_dir, self.claim_sets, self.reader.losses())
        if finished is not None:
            self._done_since = self._done_since or now
            if now - self._done_since >= self.grace_s:
                pending = int(self.reader.metrics().get("store/pending", 0))
                return Poll("exhausted", message=f"{_why_finished(finished)}; {pending} group(s) left, "
                                                 f"fewer than a batch of {self.n_groups}")
        else:
            self._done_since = None
        waited = now - (self._waiting_since or now)
        if waited >= self.timeout_s:
            return Poll("timeout", message=(
                f"waited {waited:.0f} s for {self.n_groups} experience groups (buffer.trainer_input."
                "experience_buffer.max_read_timeout); explorers may be slow, dead or not started. See "
                f"`rfthpc store inspect {self.run_dir}` and the explorer logs in {RunDir(self.run_dir).log}"))
        return Poll("wait")
