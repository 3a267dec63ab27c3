"""`rfthpc submit` and `rfthpc add-explorers`: from a config to queued jobs recorded in jobs.jsonl.

Order matters: everything that can fail on the login node (config, credentials in setup lines,
Slurm reachable, jobs of the run still live) is checked before the run directory is touched, so
a failed submit can simply be repeated. A run is never given a second trainer or a second array
of one explorer name while the first is queued or running.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from rfthpc.config import LoadedConfig, dump_yaml, load_resolved, resolve_stages
from rfthpc.config.derive import shared_models
from rfthpc.config.schema import Config
from rfthpc.errors import ConfigError, UserError
from rfthpc.launch.explorer_config import merged_explorer_config
from rfthpc.launch.job_states import live_jobs
from rfthpc.launch.resources import check_no_secrets
from rfthpc.launch.run_dir import prepare_run_dir
from rfthpc.launch.slurmcli import check_controller
from rfthpc.launch.snapshot import code_hash, package_dir, snapshot_code
from rfthpc.launch.submission import JobPlan, explorer_plan, plan_jobs, submit_plans, write_scripts
from rfthpc.rundir.jobs import JobRecord, read_jobs
from rfthpc.rundir.paths import RunDir, run_dir_of
from rfthpc.sharedfs.fileops import make_dirs, set_share_group, write_text_atomic

DRY_RUN_DIR = "dry-run"


@dataclass
class SubmitResult:
    """What a submission did: the run directory, the jobs queued (none for a dry run), files written."""

    run_dir: RunDir
    records: list[JobRecord] = field(default_factory=list)
    scripts: list[Path] = field(default_factory=list)
    dry_run: bool = False


def _private_files(cfg: Config) -> None:
    """Create everything from now on (here and, through sbatch's umask, in the jobs) private or group-shared."""
    set_share_group(cfg.filesystem.share_group)
    os.umask(0o007 if cfg.filesystem.share_group else 0o077)


def _check_submittable(cfg: Config) -> None:
    if cfg.slurm.executor == "local":
        raise ConfigError(
            "slurm.executor is 'local': explorers added to a local run are started with `rfthpc run`, "
            "not queued; set slurm.executor: slurm to queue them on Slurm"
        )
    check_no_secrets(cfg)


def run_here(loaded: LoadedConfig, resume: bool = False, dry_run: bool = False) -> int:
    """`slurm.executor: local`: run the roles as local processes, as `rfthpc run` does; return the exit code."""
    from rfthpc.launch.local import plan_roles, run_local

    cfg = loaded.config
    check_no_secrets(cfg)
    run = prepare_run_dir(loaded, resume=resume or _never_started(run_dir_of(cfg), count_jobs=True))
    roles = plan_roles(loaded.stages, run)
    print(f"rfthpc submit: slurm.executor is 'local': running {', '.join(r.name for r in roles)} here "
          f"(logs in {run.log})")
    if dry_run:
        for role in roles:
            print(f"  {role.name}: {shlex.join(role.argv)}")
        return 0
    return run_local(run, roles, {s.name: s.config.buffer.total_steps for s in loaded.stages})


def _code_dir(cfg: Config, run: RunDir, dry_run: bool) -> Path | None:
    if not cfg.slurm.snapshot_code:
        return None
    root = run.slurm / "code"
    return root / code_hash(package_dir()) if dry_run else snapshot_code(root)


def _never_started(run: RunDir, count_jobs: bool) -> bool:
    """True for a run directory no role has worked in (only a dry run, or jobs that never started).

    With `count_jobs`, any submission recorded in jobs.jsonl counts as a start (a dry run cannot
    ask Slurm whether those jobs are still queued).
    """
    marks = [run.trainer_meta, run.latest_checkpoint_file, run.explorer_meta_root]
    return not any(p.exists() for p in marks + ([run.jobs] if count_jobs else []))


def _refuse_live_duplicates(run: RunDir, plans: list[JobPlan]) -> None:
    """Refuse to queue a second trainer, a second array of an explorer name, or a second server of an
    auxiliary model, while the first is live."""
    records = read_jobs(run)
    wanted_trainer = any(p.kind in ("trainer", "hetjob", "colocated") for p in plans)
    wanted_names = {p.explorer for p in plans if p.explorer and p.kind != "server"}
    wanted_servers = {p.server for p in plans if p.server}
    clashing = [r for r in records if (wanted_trainer and r.runs_trainer()) or set(r.explorer_names()) & wanted_names
                or (r.role == "server" and r.server in wanted_servers)]
    live, error = live_jobs(clashing)
    if live:
        jobs = ", ".join(f"{r.job_id} ({' '.join(filter(None, (r.role, r.server or r.explorer)))})" for r in live)
        raise UserError(
            f"run {run.root} still has queued or running jobs that this submission would duplicate: {jobs}"
            f"{' (Slurm did not answer: ' + error + ')' if error else ''}; wait for them, or stop them with "
            f"`rfthpc cancel {run.root}`, then submit again"
        )


def submit_run(loaded: LoadedConfig, resume: bool = False, dry_run: bool = False) -> SubmitResult:
    """Create the run directory and queue the jobs of `loaded`.

    A dry run creates the run directory and its config (what the hand templates in `slurm/`
    need), writes the sbatch scripts to `slurm/dry-run/` and queues nothing. A run directory that
    never started may be re-prepared with a changed config.
    """
    cfg = loaded.config
    _check_submittable(cfg)
    _private_files(cfg)
    stage_modes = [stage.config.mode for stage in loaded.stages]
    planned = run_dir_of(cfg)
    if not dry_run:
        check_controller()
        _refuse_live_duplicates(planned, plan_jobs(cfg, stage_modes, planned, None))
    run = prepare_run_dir(loaded, resume=resume or _never_started(planned, count_jobs=dry_run))
    plans = plan_jobs(cfg, stage_modes, run, _code_dir(cfg, run, dry_run))
    if dry_run:
        return SubmitResult(run, scripts=write_scripts(plans, make_dirs(run.slurm / DRY_RUN_DIR)), dry_run=True)
    scripts = write_scripts(plans, make_dirs(run.slurm))
    records = submit_plans(plans, run, cfg.filesystem.lock_type, "submit")
    return SubmitResult(run, records, scripts)


def run_base_config(run: RunDir) -> Path:
    """The config file that describes a run: `config.yaml`, or for an explorer-only run its first explorer's."""
    if run.config.is_file():
        return run.config
    candidates = sorted((run.root / "explorers").glob("*/config.yaml"))
    if candidates:
        return candidates[0]
    raise UserError(
        f"{run.root} is not a run directory (no config.yaml); create the run with `rfthpc submit --config FILE` first"
    )


def _check_new_name(run: RunDir, run_cfg: Config, name: str, config_text: str, ask_slurm: bool) -> None:
    if run.config.is_file() and name == run_cfg.explorer.name:
        raise UserError(
            f"explorer name {name!r} is the run's own explorer array; give the new array another name "
            "(--name, or explorer.name in its config)"
        )
    same_name = [r for r in read_jobs(run) if name in r.explorer_names()]
    if ask_slurm:
        live, error = live_jobs(same_name)
        if live:
            raise UserError(
                f"explorer array {name!r} is still queued or running (job {', '.join(r.job_id for r in live)}"
                f"{'; Slurm did not answer: ' + error if error else ''}); give the new array another --name"
            )
    old = run.explorer_config(name)
    # Without Slurm (dry run) an array of that name may still be running on its config: keep it.
    if not ask_slurm and same_name and old.is_file() and old.read_text() != config_text:
        raise UserError(
            f"{old} holds the config of explorer array {name!r}, submitted before; give the new array another --name"
        )


def _check_served(cfg: Config, run_cfg: Config) -> None:
    """An added explorer array uses the run's servers of shared auxiliary models (it queues none): each
    shared auxiliary model it names must be one of the run's, the same model."""
    served = {m.name: m for m in shared_models(run_cfg)}
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        run_model = served.get(aux.name)
        if aux.placement != "shared" or (run_model is not None and run_model.model_path == aux.model_path):
            continue
        raise ConfigError(
            f"explorer.auxiliary_models[{i}] ({aux.name!r}) has placement shared, but the run serves "
            + (f"{aux.name!r} from {run_model.model_path}" if run_model is not None
               else f"no shared auxiliary model of that name (it serves: {', '.join(served) or 'none'})")
            + "; explorers added to a run use its servers: name one of them, or set placement: per_explorer"
        )


def add_explorers(
    run_dir: Path,
    config: Path | None = None,
    overrides: list[str] | None = None,
    name: str | None = None,
    array_size: int | None = None,
    dry_run: bool = False,
    check_paths: bool = True,
) -> SubmitResult:
    """Queue a new explorer array for a running run, with its own name, resources and (optionally) tasksets.

    The array's config goes to `explorers/<name>/config.yaml`; a dry run writes it and the sbatch
    script (to `slurm/dry-run/`) and queues nothing.
    """
    run = RunDir(run_dir)
    if not run.root.is_dir():
        raise UserError(f"run directory {run.root} does not exist; give the directory `rfthpc submit` printed")
    if config is None and not name:
        raise UserError("the new explorer array needs its own name: pass --name NAME (or --config with explorer.name)")
    run_cfg = load_resolved(run_base_config(run)).base
    _private_files(run_cfg)
    cfg = merged_explorer_config(run_cfg, config, list(overrides or []), name, array_size, check_paths)
    _check_submittable(cfg)
    if not dry_run:
        check_controller()
    text = dump_yaml(cfg)
    _check_new_name(run, run_cfg, cfg.explorer.name, text, ask_slurm=not dry_run)
    write_text_atomic(run.explorer_config(cfg.explorer.name), text)
    final = resolve_stages(cfg, source=str(config or run.config))[-1].config
    _check_served(final, run_cfg)
    plans = [explorer_plan(final, run, _code_dir(cfg, run, dry_run))]
    if dry_run:
        return SubmitResult(run, scripts=write_scripts(plans, make_dirs(run.slurm / DRY_RUN_DIR)), dry_run=True)
    scripts = write_scripts(plans, make_dirs(run.slurm))
    records = submit_plans(plans, run, cfg.filesystem.lock_type, "add-explorers")
    return SubmitResult(run, records, scripts)
