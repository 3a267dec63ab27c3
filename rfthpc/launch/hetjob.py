"""Heterogeneous Slurm jobs through submitit: the trainer and the explorers co-scheduled in one allocation.

submitit has no support for `#SBATCH hetjob`; `HetjobExecutor` adds it. The script holds one
`#SBATCH` block per component, separated by `#SBATCH hetjob`, and one srun step spanning every
component (`srun --het-group=0-1`), so every task runs the same pickled callable with one global
SLURM_PROCID: the trainer's nodes first (component 0, where the batch script runs), then the
explorers. The callable picks its role from its rank, and rank 0 (the trainer's first node)
requeues the whole job. sacct names the components `<id>+<k>`; the job's state is its leader's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from submitit.core import core, utils
from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob, _make_sbatch_string

from rfthpc.launch.executors import RunExecutor

# Options that belong to the batch script, which runs in component 0 only.
_BATCH_ONLY = ("#SBATCH --output", "#SBATCH --error", "#SBATCH --open-mode")


class HetjobInfoWatcher(SlurmInfoWatcher):
    """Reads sacct for heterogeneous jobs: the state of `<id>` is the state of its leader `<id>+0`."""

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        """sacct's rows by job id, plus each leader `<id>+0`'s row under the plain `<id>` too."""
        info = super().read_info(string)
        for key, stats in list(info.items()):
            leader, plus, component = key.partition("+")
            if plus and component == "0":
                info.setdefault(leader, stats)
        return info


class HetjobJob(SlurmJob[core.R]):
    """A submitit job handle for a heterogeneous job (identified by its leader's id)."""

    watcher = HetjobInfoWatcher(delay_s=600)


class HetjobExecutor(RunExecutor):
    """Submits one callable as a heterogeneous job.

    The executor's own parameters (`update_parameters`) describe component 0; `components` gives
    the sbatch parameters of the others (same names as submitit's, e.g. `gpus_per_task`,
    `mem_per_cpu`, `additional_parameters={"ntasks": 4}`).
    """

    job_class = HetjobJob

    def __init__(
        self,
        folder: str | Path,
        components: Sequence[Mapping[str, Any]],
        max_num_timeout: int = 3,
        python: str | None = None,
    ) -> None:
        super().__init__(folder, max_num_timeout=max_num_timeout, python=python)
        if not components:
            raise ValueError("a heterogeneous job needs at least one component besides the first")
        self.components = [dict(c) for c in components]
        for params in self.components:
            _make_sbatch_string(command="", folder=self.folder, **params)  # fails early on an unknown option

    def render(self, array_size: int | None = None) -> str:
        """The heterogeneous job's sbatch script: component 0's options, then `#SBATCH hetjob` + each other's."""
        if array_size is not None:
            raise ValueError("a heterogeneous job cannot be a job array")
        params = dict(self.parameters)
        params["srun_args"] = [*params.get("srun_args", []), f"--het-group=0-{len(self.components)}"]
        lines = _make_sbatch_string(command=self._submitit_command_str, folder=self.folder, **params).split("\n")
        insert_at = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH")) + 1
        extra: list[str] = []
        for params in self.components:
            text = _make_sbatch_string(command="", folder=self.folder, **params)
            extra.append("#SBATCH hetjob")
            extra += [ln for ln in text.split("\n") if ln.startswith("#SBATCH") and not ln.startswith(_BATCH_ONLY)]
        return "\n".join(lines[:insert_at] + extra + lines[insert_at:])

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        return self.render()

    def _num_tasks(self) -> int:
        total = super()._num_tasks()
        for params in self.components:
            total += int(params.get("additional_parameters", {}).get("ntasks", 1))
        return total

    def _internal_process_submissions(
        self, delayed_submissions: list[utils.DelayedSubmission]
    ) -> list[core.Job[Any]]:
        if len(delayed_submissions) != 1:
            raise ValueError("a heterogeneous job runs exactly one callable (its tasks pick their roles by rank)")
        return super()._internal_process_submissions(delayed_submissions)
