"""From a config to queued Slurm jobs: which jobs a run needs, their scripts, and their submission.

Layouts (`slurm.layout`):
- `separate` (default): a trainer job and an explorer job array, each with its own resources;
  they can start in any order and be requeued independently.
- `hetjob`: one heterogeneous job, trainer in component 0 and the explorers as the tasks of
  component 1, co-scheduled in one allocation.
- `colocated`: one job on one node, the trainer (task 0) on all its GPUs and each explorer (task k + 1)
  on a group of the same GPUs; explorer arrays added later run as usual on GPUs of their own.
A `mode: train` / `mode: explore` config (one half of an asynchronous pair) submits its one role.
Every auxiliary model with `placement: shared` gets a server job array of its own (one task per
engine), submitted with the explorers in either layout (before them: it takes longest to start).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from submitit.core.utils import FailedJobError

from rfthpc.config.derive import explorer_task_gpus, shared_models
from rfthpc.config.schema import Config, explores, trains
from rfthpc.launch.executors import RunExecutor
from rfthpc.launch.hetjob import HetjobExecutor
from rfthpc.launch.resources import (
    colocated_parameters,
    config_keys,
    executor_parameters,
    hetjob_explorer_parameters,
    hetjob_trainer_parameters,
    nproc_per_node,
    server_parameters,
)
from rfthpc.launch.slurmcli import run_slurm, sbatch_rejection
from rfthpc.launch.submitit_jobs import RoleJob
from rfthpc.rundir.jobs import JobRecord, JobRole, record_job
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import write_text_atomic


@dataclass
class JobPlan:
    """One Slurm submission: its executor (resources), the callables its tasks run, and its record."""

    kind: JobRole
    executor: RunExecutor
    callables: list[RoleJob]
    script_name: str
    keys: dict[str, str] = field(default_factory=dict)
    """Resource field → config key, to name the culprit when sbatch rejects the job."""
    explorer: str | None = None
    array_size: int = 0
    trainer_nodes: int = 0
    server: str | None = None
    """The auxiliary model a server array serves."""

    @property
    def is_array(self) -> bool:
        """True for a job array (explorers, servers)."""
        return self.kind in ("explorer", "server")

    def render(self) -> str:
        """The sbatch script this submission uses."""
        return self.executor.render(self.array_size if self.is_array else None)


def roles_of(stage_modes: Sequence[str]) -> tuple[bool, bool]:
    """(needs a trainer, needs explorers) for a run whose stages have these modes."""
    return any(map(trains, stage_modes)), any(map(explores, stage_modes))


def python_of(cfg: Config) -> str:
    """The Python the jobs run: `slurm.python`, else the submitting interpreter."""
    return cfg.slurm.python or sys.executable


def trainer_plan(cfg: Config, run_dir: RunDir, code_dir: Path | None) -> JobPlan:
    """The trainer job: `slurm.trainer.nodes` nodes, one srun task per node."""
    python = python_of(cfg)
    executor = RunExecutor(run_dir.log, max_num_timeout=cfg.slurm.max_requeues, python=python)
    executor.update_parameters(**executor_parameters(cfg, "trainer", code_dir))
    nodes = cfg.slurm.trainer.nodes
    job = RoleJob(str(run_dir.root), "trainer", python, cfg.slurm.max_requeues,
                  trainer_nodes=nodes, nproc_per_node=nproc_per_node(cfg))
    return JobPlan("trainer", executor, [job], "trainer.sbatch", config_keys(cfg, "trainer"), trainer_nodes=nodes)


def explorer_plan(cfg: Config, run_dir: RunDir, code_dir: Path | None) -> JobPlan:
    """The explorer array of `cfg.explorer.name`: `slurm.explorer.array_size` tasks, rank = array index."""
    python = python_of(cfg)
    name = cfg.explorer.name
    size = cfg.slurm.explorer.array_size
    assert size is not None, "filled by the config's derivation (rfthpc.config.derive)"
    executor = RunExecutor(run_dir.log, max_num_timeout=cfg.slurm.max_requeues, python=python)
    executor.update_parameters(**executor_parameters(cfg, "explorer", code_dir, name))
    jobs = [RoleJob(str(run_dir.root), "explorer", python, cfg.slurm.max_requeues, explorer=name, rank=k)
            for k in range(size)]
    return JobPlan("explorer", executor, jobs, f"explorer-{name}.sbatch", config_keys(cfg, "explorer"),
                   explorer=name, array_size=size)


def server_plans(cfg: Config, run_dir: RunDir, code_dir: Path | None) -> list[JobPlan]:
    """The server array of each shared auxiliary model: `engine_num` tasks, task k serving engine k."""
    python = python_of(cfg)
    plans = []
    for model in shared_models(cfg):
        executor = RunExecutor(run_dir.log, max_num_timeout=cfg.slurm.max_requeues, python=python)
        executor.update_parameters(**server_parameters(cfg, model, code_dir))
        jobs = [RoleJob(str(run_dir.root), "server", python, cfg.slurm.max_requeues, explorer=cfg.explorer.name,
                        rank=k, server=model.name) for k in range(model.engine_num)]
        plans.append(JobPlan("server", executor, jobs, f"server-{model.name}.sbatch", config_keys(cfg, "server"),
                             array_size=model.engine_num, server=model.name))
    return plans


def hetjob_plan(cfg: Config, run_dir: RunDir, code_dir: Path | None) -> JobPlan:
    """Trainer (component 0) and explorers (component 1) in one heterogeneous job."""
    python = python_of(cfg)
    name = cfg.explorer.name
    size = cfg.slurm.explorer.array_size
    assert size is not None, "filled by the config's derivation (rfthpc.config.derive)"
    nodes = cfg.slurm.trainer.nodes
    executor = HetjobExecutor(run_dir.log, [hetjob_explorer_parameters(cfg, size)],
                              max_num_timeout=cfg.slurm.max_requeues, python=python)
    executor.update_parameters(**hetjob_trainer_parameters(cfg, code_dir))
    job = RoleJob(str(run_dir.root), "hetjob", python, cfg.slurm.max_requeues, explorer=name,
                  trainer_nodes=nodes, nproc_per_node=nproc_per_node(cfg))
    keys = {**config_keys(cfg, "explorer"), **config_keys(cfg, "trainer")}
    for field_name, key in config_keys(cfg, "explorer").items():
        if field_name in keys and keys[field_name] != key:
            keys[field_name] = f"{keys[field_name]} / {key}"
    return JobPlan("hetjob", executor, [job], "hetjob.sbatch", keys, explorer=name, array_size=size,
                   trainer_nodes=nodes)


def colocated_plan(cfg: Config, run_dir: RunDir, code_dir: Path | None) -> JobPlan:
    """Trainer (task 0) and explorers (tasks 1..) in one job on one node, sharing its GPUs."""
    python = python_of(cfg)
    name = cfg.explorer.name
    size = cfg.slurm.explorer.array_size
    assert size is not None, "filled by the config's derivation (rfthpc.config.derive)"
    executor = RunExecutor(run_dir.log, max_num_timeout=cfg.slurm.max_requeues, python=python)
    executor.update_parameters(**colocated_parameters(cfg, code_dir, size))
    job = RoleJob(str(run_dir.root), "colocated", python, cfg.slurm.max_requeues, explorer=name,
                  trainer_nodes=1, nproc_per_node=nproc_per_node(cfg),
                  explorer_gpus=explorer_task_gpus(cfg) if cfg.cluster.gpu_per_node > 0 else 0,
                  time_share_gpus=bool(cfg.explorer.rollout_model.enable_sleep_mode))
    return JobPlan("colocated", executor, [job], "colocated.sbatch", config_keys(cfg, "trainer"), explorer=name,
                   array_size=size, trainer_nodes=1)


def plan_jobs(cfg: Config, stage_modes: Sequence[str], run_dir: RunDir, code_dir: Path | None) -> list[JobPlan]:
    """The submissions a run needs, from its stages' modes and `slurm.layout`."""
    trainer, explorers = roles_of(stage_modes)
    servers = server_plans(cfg, run_dir, code_dir) if explorers else []
    if trainer and explorers and cfg.slurm.layout == "hetjob":
        return [*servers, hetjob_plan(cfg, run_dir, code_dir)]
    if trainer and explorers and cfg.slurm.layout == "colocated":
        return [*servers, colocated_plan(cfg, run_dir, code_dir)]
    plans = []
    if trainer:
        plans.append(trainer_plan(cfg, run_dir, code_dir))
    if explorers:
        plans += [*servers, explorer_plan(cfg, run_dir, code_dir)]
    return plans


def write_scripts(plans: Sequence[JobPlan], folder: Path) -> list[Path]:
    """Write each plan's sbatch script into `folder`; return the paths."""
    paths = []
    for plan in plans:
        path = folder / plan.script_name
        write_text_atomic(path, plan.render())
        paths.append(path)
    return paths


def cancel_quietly(job_ids: Sequence[str]) -> None:
    """scancel jobs submitted moments ago (a later submission of the same run failed)."""
    if job_ids:
        run_slurm(["scancel", *job_ids], timeout_s=30, check=False)


def submit_plans(
    plans: Sequence[JobPlan], run_dir: RunDir, lock_kind: str, submitted_by: str
) -> list[JobRecord]:
    """Submit every plan in order and record each in jobs.jsonl.

    If sbatch rejects one, the jobs this call already queued are cancelled (a run with half its
    roles would wait forever) and the rejection is raised with the config keys that may cause it.
    """
    records: list[JobRecord] = []
    for plan in plans:
        try:
            if plan.is_array:
                jobs = plan.executor.submit_array_of(plan.callables)
                job_id = jobs[0].job_id.split("_")[0]
                script = jobs[0].paths.submission_file
            else:
                job = plan.executor.submit(plan.callables[0])
                job_id = job.job_id
                script = job.paths.submission_file
        except FailedJobError as e:
            cancel_quietly([r.job_id for r in records])
            error = sbatch_rejection(str(e), plan.keys)
            if records:
                queued = ", ".join(r.job_id for r in records)
                error.args = (f"{error.args[0]} (cancelled the jobs queued before it: {queued})",)
            raise error from None
        record = JobRecord(
            role=plan.kind, job_id=job_id, explorer=plan.explorer, array_size=plan.array_size,
            trainer_nodes=plan.trainer_nodes, script=str(script), log_dir=str(run_dir.log),
            submitted_by=submitted_by, server=plan.server,
        )
        record_job(run_dir, record, lock_kind)  # type: ignore[arg-type]
        records.append(record)
    return records
