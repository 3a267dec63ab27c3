"""The run directory: the only channel between the roles, and the names of everything in it.

Layout (see docs/run-directory.md):

    config.yaml                        resolved config, written once at submit
    jobs.jsonl                         one line per submission
    experiences/<explorer>/            committed experience chunks (HDF5), one writer per file
    tasks/                             task-claim state shared by explorers
    weights/step_<N>/, weights/latest/ published policies for explorers
    global_step_<N>/actor/             resumable trainer checkpoints
    latest_checkpointed_iteration.txt
    trainer_meta/<n>, explorer_meta/<name>/<rank>.json
    servers/<model>/<engine>/<n>       addresses of shared auxiliary model servers (a journal per engine)
    endpoints/<explorer>_<rank>_...    where each explorer process serves its policy to agents
    log/, monitor/

Roles never import each other's internals; they all use these names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfthpc.errors import UserError
from rfthpc.sharedfs.fileops import make_dirs

if TYPE_CHECKING:
    from rfthpc.config import Config

CONFIG_FILE = "config.yaml"
JOBS_FILE = "jobs.jsonl"
LATEST_CHECKPOINT_FILE = "latest_checkpointed_iteration.txt"
READER_DIR = "_reader"
"""`experiences/_reader/`: the trainer's records about the store (what it consumed, checkpointed and lost)."""


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory (`<checkpoint_root_dir>/<project>/<name>`)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().absolute())

    @property
    def config(self) -> Path:
        """The resolved config the run was created with."""
        return self.root / CONFIG_FILE

    @property
    def jobs(self) -> Path:
        """One JSON line per submission (role, explorer name, job id, array size, time)."""
        return self.root / JOBS_FILE

    @property
    def experiences(self) -> Path:
        """Root of the experience store."""
        return self.root / "experiences"

    @property
    def tasks(self) -> Path:
        """Task-claim state shared by explorers."""
        return self.root / "tasks"

    @property
    def weights(self) -> Path:
        """Published policies (`step_<N>/`) and the `latest` pointer."""
        return self.root / "weights"

    def weights_step(self, step: int) -> Path:
        """Directory of the policy published after trainer step `step`."""
        return self.weights / f"step_{step}"

    @property
    def latest_checkpoint_file(self) -> Path:
        """Text file holding the newest complete trainer checkpoint step."""
        return self.root / LATEST_CHECKPOINT_FILE

    def checkpoint(self, step: int) -> Path:
        """Directory of the resumable trainer checkpoint after step `step`."""
        return self.root / f"global_step_{step}"

    def explorer_config(self, name: str) -> Path:
        """Config of explorer array `name` when it differs from the run's (async pairs, add-explorers)."""
        return self.root / "explorers" / name / CONFIG_FILE

    def role_config(self, explorer: str | None = None) -> Path:
        """The config a role reads: the explorer's own if it has one, else the run's."""
        if explorer is not None and self.explorer_config(explorer).exists():
            return self.explorer_config(explorer)
        return self.config

    @property
    def trainer_meta(self) -> Path:
        """The trainer's reports (step, stage, published version): a journal, its newest entry the
        current one (`rfthpc.rundir.trainer_meta`)."""
        return self.root / "trainer_meta"

    @property
    def explorer_meta_root(self) -> Path:
        """Progress records of every explorer process, `<name>/<rank>.json`."""
        return self.root / "explorer_meta"

    def explorer_meta(self, name: str, rank: int) -> Path:
        """Progress record of one explorer process (array `name`, task `rank`)."""
        return self.explorer_meta_root / name / f"{rank}.json"

    @property
    def endpoints(self) -> Path:
        """Where each explorer process serves its policy to agents: `<explorer>_<rank>_<host>_<pid>.json`."""
        return self.root / "endpoints"

    @property
    def servers(self) -> Path:
        """Addresses of the shared auxiliary models' servers, a journal per engine: `<name>/<engine>/`."""
        return self.root / "servers"

    @property
    def log(self) -> Path:
        """Slurm and local role logs."""
        return self.root / "log"

    @property
    def monitor(self) -> Path:
        """Metrics (jsonl per role), wandb offline runs, TensorBoard event files, plots."""
        return self.root / "monitor"

    @property
    def slurm(self) -> Path:
        """Generated sbatch scripts and the code snapshot queued jobs run."""
        return self.root / "slurm"

    def create(self) -> RunDir:
        """Create the run directory and its top-level folders with the run's permissions."""
        for d in (self.root, self.experiences, self.tasks, self.weights, self.log, self.monitor):
            make_dirs(d)
        return self


OLDER_LAYOUT = ("trainer_meta.json", "weights/latest", "experiences/_doorbell")
"""Files an older rfthpc replaced in place where this one keeps journals (directories)."""


def check_layout(run: RunDir) -> None:
    """Refuse a run directory an older rfthpc made: its hand-off files were replaced in place, where
    this version reads journals, so its roles and this version's would not see each other."""
    old = [name for name in OLDER_LAYOUT if (run.root / name).is_file()]
    if old:
        raise UserError(
            f"run directory {run.root} was made by an older rfthpc ({', '.join(old)} is a file there, a journal "
            "directory in this version); finish it with the rfthpc that started it, or start a new run "
            "(another `name`)"
        )


def run_dir_of(cfg: Config) -> RunDir:
    """The run directory a config names: `<checkpoint_root_dir>/<project>/<name>`."""
    return RunDir(Path(cfg.checkpoint_root_dir).expanduser() / cfg.project / cfg.name)


NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def check_name(what: str, value: str) -> str:
    """Return `value` if it is a safe directory/file name component, else raise UserError."""
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise UserError(
            f"{what} {value!r} is not a valid name: use 1-100 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return value
