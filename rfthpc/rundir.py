"""The run directory: the only channel between the roles, and the names of everything in it.

Layout (see docs/run-directory.md):

    config.yaml                        resolved config, written once at submit
    jobs.jsonl                         one line per submission
    experiences/<explorer>/            committed experience chunks (HDF5), one writer per file
    tasks/                             task-claim state shared by explorers
    weights/step_<N>/, weights/latest  published policies for explorers
    global_step_<N>/actor/             resumable trainer checkpoints
    latest_checkpointed_iteration.txt
    trainer_meta.json, explorer_meta/<name>/<rank>.json
    servers/<model>/<engine>.json      addresses of shared auxiliary model servers
    log/, monitor/

Roles never import each other's internals; they all use these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfthpc.errors import UserError
from rfthpc.fsutil import make_dirs, set_share_group, write_text_atomic

if TYPE_CHECKING:
    from rfthpc.config import Config, LoadedConfig

CONFIG_FILE = "config.yaml"
JOBS_FILE = "jobs.jsonl"
LATEST_CHECKPOINT_FILE = "latest_checkpointed_iteration.txt"


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
        """Trainer progress summary (step, stage, published version)."""
        return self.root / "trainer_meta.json"

    @property
    def explorer_meta_root(self) -> Path:
        """Progress records of every explorer process, `<name>/<rank>.json`."""
        return self.root / "explorer_meta"

    def explorer_meta(self, name: str, rank: int) -> Path:
        """Progress record of one explorer process (array `name`, task `rank`)."""
        return self.explorer_meta_root / name / f"{rank}.json"

    @property
    def servers(self) -> Path:
        """Addresses of the shared auxiliary models' servers, `<name>/<engine>.json`."""
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


def run_dir_of(cfg: Config) -> RunDir:
    """The run directory a config names: `<checkpoint_root_dir>/<project>/<name>`."""
    return RunDir(Path(cfg.checkpoint_root_dir).expanduser() / cfg.project / cfg.name)


def prepare_run_dir(loaded: LoadedConfig, resume: bool = False) -> RunDir:
    """Create (or reopen) the run directory of a config and record the config in it.

    `mode: explore` configs are recorded as their explorer's own config
    (`explorers/<name>/config.yaml`), every other mode as the run's `config.yaml`, so the two
    halves of an asynchronous pair share one run directory. Reopening a run whose recorded config
    differs is refused unless `resume` (the old config is then kept beside the new one); reopening
    one with the same config resumes it when `continue_from_checkpoint` is set.
    """
    import time

    from rfthpc.config import dump_yaml

    cfg = loaded.config
    set_share_group(cfg.filesystem.share_group)
    run = run_dir_of(cfg)
    target = run.explorer_config(cfg.explorer.name) if cfg.mode == "explore" else run.config
    text = dump_yaml(loaded.base)
    if target.exists():
        old = target.read_text()
        if old != text:
            if not resume:
                raise UserError(
                    f"run directory {run.root} already holds a different config ({target}); "
                    "pass --resume to continue it with the new config, or choose another `name`"
                )
            write_text_atomic(target.with_name(f"config.{time.strftime('%Y%m%d-%H%M%S')}.yaml"), old)
        elif not (resume or cfg.continue_from_checkpoint):
            raise UserError(
                f"run directory {run.root} exists and continue_from_checkpoint is false; "
                "choose another `name`, remove the directory, or pass --resume"
            )
    _check_pair_sync_styles(run, loaded, target)
    run.create()
    write_text_atomic(target, text)
    return run


def _check_pair_sync_styles(run: RunDir, loaded: LoadedConfig, target: Path) -> None:
    """The configs of one run's trainer and explorers must agree on `synchronizer.sync_style`, stage by
    stage: under explorer_driven the trainer publishes only when explorers ask, so a trainer and
    explorers of different styles would wait for each other until `sync_timeout`."""
    from rfthpc.config import load_resolved
    from rfthpc.errors import ConfigError

    mine = {s.name: s.config.synchronizer.sync_style for s in loaded.stages}
    others = [run.config] if target != run.config else sorted(run.root.glob(f"explorers/*/{CONFIG_FILE}"))
    for path in others:
        if not path.is_file():
            continue
        theirs = {s.name: s.config.synchronizer.sync_style for s in load_resolved(path).stages}
        for name in sorted(mine.keys() & theirs.keys()):
            if mine[name] != theirs[name]:
                raise ConfigError(
                    f"{loaded.source or 'config'}: synchronizer.sync_style {mine[name]!r} (stage {name!r}) differs "
                    f"from {theirs[name]!r} in {path}, the config of the other role of this run: trainer and "
                    "explorers must agree on who decides when weights move (explorer_driven: the trainer publishes "
                    "only when explorers ask). Set the same sync_style in both configs"
                )
