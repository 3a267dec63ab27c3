"""submitit's Slurm executor, extended for rfthpc: scripts rendered without a cluster, arrays with the
configured python.

- `render()` gives the exact sbatch text a submission would use, so `--dry-run` and the golden-file
  tests work on any machine (submitit refuses to build an executor where `srun` is missing;
  `rfthpc submit` checks for Slurm itself before it submits).
- Arrays are submitted by this executor itself, so they keep `slurm.python` (submitit's own
  array path builds a fresh executor with the submitting interpreter).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from submitit.core import core, utils
from submitit.slurm.slurm import SlurmExecutor, _make_sbatch_string


class RunExecutor(SlurmExecutor):
    """A SlurmExecutor whose jobs write their logs and pickles to one folder (`<run dir>/log`)."""

    @classmethod
    def affinity(cls) -> int:
        """Always usable: rfthpc checks for Slurm before submitting, and dry-runs need no cluster."""
        return 2

    def render(self, array_size: int | None = None) -> str:
        """The sbatch script of a job (an array of `array_size` tasks if given), as it would be submitted."""
        params = dict(self.parameters)
        if array_size is not None:
            params["map_count"] = array_size
        return _make_sbatch_string(command=self._submitit_command_str, folder=self.folder, **params)

    def submit_array_of(self, fns: Sequence[Callable[[], Any]]) -> list[core.Job[Any]]:
        """Submit `fns` as one job array (also when there is a single one): task i runs fns[i]."""
        if not fns:
            raise ValueError("an array needs at least one task")
        return self._submit_array([utils.DelayedSubmission(fn) for fn in fns])

    def _internal_process_submissions(
        self, delayed_submissions: list[utils.DelayedSubmission]
    ) -> list[core.Job[Any]]:
        if len(delayed_submissions) == 1:
            return super()._internal_process_submissions(delayed_submissions)
        return self._submit_array(delayed_submissions)

    def _submit_array(self, delayed_submissions: Sequence[utils.DelayedSubmission]) -> list[core.Job[Any]]:
        """One sbatch array; task i runs delayed_submissions[i] (its pickle is named after `<array id>_<i>`)."""
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        staged: list[Path] = []
        for delayed in delayed_submissions:
            path = folder / f".pending-{uuid.uuid4().hex}.pkl"
            delayed.set_timeout(self.parameters.get("time", 5), self.max_num_timeout)
            delayed.dump(path)
            staged.append(path)
        single_params = self.parameters
        self.parameters = {**single_params, "map_count": len(delayed_submissions)}
        try:
            self._throttle()
            first = self._submit_command(self._submitit_command_str)
        except BaseException:
            for path in staged:
                path.unlink(missing_ok=True)
            raise
        finally:
            self.parameters = single_params
        jobs: list[core.Job[Any]] = []
        for index, path in enumerate(staged):
            job = self.job_class(folder=self.folder, job_id=f"{first.job_id}_{index}",
                                 tasks=list(range(first.num_tasks)))
            job.paths.move_temporary_file(path, "submitted_pickle")
            jobs.append(job)
        return jobs

