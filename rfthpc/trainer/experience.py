"""The RL stages' input on rank 0: batches of experience groups from the store, or "not yet",
or "no more" (the explorers' tasks are done and less than a batch is left), or a timeout.

The wait for a batch is cut into short polls so that the training loop can react to a stop
signal in between; `buffer.trainer_input.experience_buffer.max_read_timeout` bounds the whole wait.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rfthpc.fsutil import read_json
from rfthpc.rundir import RunDir
from rfthpc.store import Group, StoreReader, StoreTimeout
from rfthpc.store.claims import CLAIMS_FILE
from rfthpc.trainer.samples import Sample, samples_from_groups


def tasksets_finished(run_dir: Path, names: list[str]) -> bool:
    """True if every taskset in `names` has a claims file saying all its tasks were completed.

    Reads `tasks/<taskset>/claims.json` (the store's task-claim state) without its lock: the file
    is replaced atomically, and a stale view only delays the decision to a later poll.
    """
    if not names:
        return False
    for name in names:
        state = read_json(RunDir(run_dir).tasks / name / CLAIMS_FILE)
        if not isinstance(state, dict):
            return False
        max_tasks = state.get("max_tasks")
        fresh_left = state.get("epoch", 0) < state.get("total_epochs", 1) and (
            max_tasks is None or state.get("issued", 0) < max_tasks)
        if fresh_left or state.get("outstanding") or state.get("returned"):
            return False
    return True


@dataclass
class Poll:
    """What one poll of the store found."""

    status: str
    """batch | wait | exhausted | timeout"""
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
        tasksets: list[str],
        *,
        vocab_size: int,
        max_length: int | None,
        temperature: float,
        timeout_s: float,
        poll_s: float,
        grace_s: float,
    ) -> None:
        """`grace_s`: once the tasks are done, how long to wait for chunks still being committed."""
        self.run_dir = Path(run_dir)
        self.reader = reader
        self.n_groups = n_groups
        self.tasksets = tasksets
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
        samples = samples_from_groups(groups, self.vocab_size, self.max_length, self.temperature, self.run_dir)
        return Poll("batch", samples, groups)

    def _no_batch(self, now: float) -> Poll:
        if tasksets_finished(self.run_dir, self.tasksets):
            self._done_since = self._done_since or now
            if now - self._done_since >= self.grace_s:
                pending = int(self.reader.metrics().get("store/pending", 0))
                return Poll("exhausted", message=f"the explorers' tasks are done; {pending} group(s) left, "
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
