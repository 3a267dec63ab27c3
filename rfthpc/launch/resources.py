"""The config's `slurm` section as submitit `SlurmExecutor` parameters (= sbatch options).

One trainer job runs one task per node (torchrun starts the ranks of a node); each explorer array
task is one runner with one rollout engine; each task of a shared auxiliary model's server array is
one engine of it. In a heterogeneous job the explorers are the tasks of the second component, so
their resources are given per task there.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from rfthpc.config.explorer import InferenceModelConfig
from rfthpc.config.schema import Config
from rfthpc.config.slurm import SlurmRoleConfig
from rfthpc.errors import ConfigError, Problems

Role = Literal["trainer", "explorer", "server"]

# Environment variables that hold credentials: they must reach jobs only through the environment
# sbatch passes on, never through a script or file in the run directory.
SECRET_PATTERN = re.compile(r"(WANDB_API_KEY|HF_TOKEN|HUGGING_FACE_HUB_TOKEN|_TOKEN\b|_SECRET\b|PASSWORD|_API_KEY\b)")

_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")
_MEM = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<u>[KMGT]?)B?$", re.IGNORECASE)


def parse_time_minutes(value: str, key: str) -> int:
    """Minutes of a Slurm time limit (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`), rounded up."""
    m = _TIME.match(str(value).strip())
    if not m:
        raise ConfigError(
            f"{key}: {value!r} is not a Slurm time limit; use e.g. 30 (minutes), 04:00:00 or 2-00:00:00"
        )
    days = int(m["d"] or 0)
    parts = [int(p) for p in (m["a"], m["b"], m["c"]) if p is not None]
    if m["d"] is not None:
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        hours, minutes, seconds = 0, parts[0], parts[1] if len(parts) == 2 else 0
    total = days * 1440 + hours * 60 + minutes + math.ceil(seconds / 60)
    if total < 1:
        raise ConfigError(f"{key}: {value!r} is shorter than a minute; give the job time to start")
    return total


def parse_mem_mb(value: str, key: str) -> int:
    """Megabytes of a Slurm memory size (`4000`, `4000M`, `4G`, `1T`; a plain number is MB)."""
    m = _MEM.match(str(value).strip())
    if not m:
        raise ConfigError(f"{key}: {value!r} is not a memory size; use e.g. 4000M, 64G or 1T")
    factor = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m["u"].upper()]
    return max(1, math.ceil(float(m["n"]) * factor))


def role_config(cfg: Config, role: Role) -> SlurmRoleConfig:
    """The `slurm.trainer`, `slurm.explorer` or `slurm.server` section."""
    return getattr(cfg.slurm, role)


def config_keys(cfg: Config, role: Role) -> dict[str, str]:
    """Resource field → `slurm.<role>.<field> = value`, for the fields the config sets (error messages)."""
    rc = role_config(cfg, role)
    keys = {}
    for name in ("partition", "account", "qos", "time", "nodes", "gpus_per_node", "cpus_per_task", "mem", "constraint"):
        value = getattr(rc, name)
        if value is not None:
            keys[name] = f"slurm.{role}.{name} = {value}"
    if rc.additional_parameters:
        keys["additional_parameters"] = f"slurm.{role}.additional_parameters = {rc.additional_parameters}"
    return keys


def check_no_secrets(cfg: Config) -> None:
    """Refuse setup lines that would write a credential into an sbatch script."""
    for key, lines in (("slurm.setup", cfg.slurm.setup), ("slurm.trainer.setup", cfg.slurm.trainer.setup),
                       ("slurm.explorer.setup", cfg.slurm.explorer.setup),
                       ("slurm.server.setup", cfg.slurm.server.setup)):
        for i, line in enumerate(lines):
            if "=" in line and SECRET_PATTERN.search(line.split("=", 1)[0]):
                raise ConfigError(
                    f"{key}[{i}] sets a credential ({line.split('=', 1)[0].split()[-1]}): it would be written into the "
                    "sbatch script; export it in your shell before `rfthpc submit` instead "
                    "(jobs inherit the environment)"
                )


def setup_lines(cfg: Config, roles: tuple[Role, ...], code_dir: Path | None) -> list[str]:
    """Shell lines the batch script runs first: permissions, the user's setup of `roles`, the code snapshot."""
    umask = "007" if cfg.filesystem.share_group else "077"
    lines = [f"umask {umask}", *cfg.slurm.setup]
    for role in roles:
        lines += role_config(cfg, role).setup
    if code_dir is not None:
        lines += [
            "# the code snapshot taken at submit; PYTHONSAFEPATH keeps `python -m` from importing the",
            "# working directory (a checkout) before it",
            f'export PYTHONPATH={_quote(str(code_dir))}"${{PYTHONPATH:+:$PYTHONPATH}}" PYTHONSAFEPATH=1',
        ]
    return lines


def _quote(text: str) -> str:
    return text if re.fullmatch(r"[\w@%+=:,./-]+", text) else "'" + text.replace("'", "'\\''") + "'"


def gpus(cfg: Config, role: Role) -> int:
    """GPUs per trainer node or per explorer array task (0 on CPU-only clusters); a server task's are
    `server_task_gpus` (`rfthpc.config.derive.server_gpus` counts all of them, for the GPU budget)."""
    return int(role_config(cfg, role).gpus_per_node or 0)


def server_task_gpus(cfg: Config, model: InferenceModelConfig) -> int:
    """GPUs of one task (engine) of `model`'s server: `slurm.server.gpus_per_node`, else its
    `tensor_parallel_size` (0 on CPU-only clusters)."""
    if cfg.cluster.gpu_per_node <= 0:
        return 0
    given = cfg.slurm.server.gpus_per_node
    return int(given if given is not None else model.tensor_parallel_size)


def nproc_per_node(cfg: Config) -> int:
    """Trainer ranks per node: one per GPU, one on a CPU-only node."""
    return max(1, gpus(cfg, "trainer"))


def job_name(cfg: Config, role: Role, name: str | None = None) -> str:
    """`<run name>.trainer`, `<run name>.<explorer name>` or `<run name>.server-<model>` (what `squeue`
    shows); `name`: the explorer array's or the auxiliary model's."""
    if role == "trainer":
        return f"{cfg.name}.trainer"
    if role == "server":
        return f"{cfg.name}.server-{name}"
    return f"{cfg.name}.{name or cfg.explorer.name}"


def executor_parameters(
    cfg: Config, role: Role, code_dir: Path | None, explorer_name: str | None = None
) -> dict[str, Any]:
    """submitit SlurmExecutor parameters of one role's job (trainer job, explorer array, or a server array:
    then `explorer_name` is the auxiliary model's name and the GPUs are set by `server_parameters`)."""
    rc = role_config(cfg, role)
    key = f"slurm.{role}"
    if cfg.slurm.signal_delay_s < 10:
        raise ConfigError(
            f"slurm.signal_delay_s: {cfg.slurm.signal_delay_s} s leaves no time to save a checkpoint before the "
            "time limit; give at least 10 s (a few minutes for large models)"
        )
    params: dict[str, Any] = {
        "job_name": job_name(cfg, role, explorer_name),
        "time": parse_time_minutes(rc.time, f"{key}.time"),
        "nodes": rc.nodes,
        "ntasks_per_node": 1,
        "signal_delay_s": cfg.slurm.signal_delay_s,
        "setup": setup_lines(cfg, (role,), code_dir),
        "stderr_to_stdout": True,
        "wckey": None,
        "additional_parameters": {"requeue": True, **rc.additional_parameters},
    }
    # Slurm sends the warning up to 60 s before the requested time: the job needs at least that long.
    if params["time"] * 60 - cfg.slurm.signal_delay_s < 60:
        raise ConfigError(
            f"{key}.time: {rc.time} leaves under a minute before slurm.signal_delay_s "
            f"({cfg.slurm.signal_delay_s:.0f} s) asks for the checkpoint warning, so the job would stop as it "
            "starts; give a longer time or a shorter signal_delay_s"
        )
    if rc.nodes < 1:
        raise ConfigError(f"{key}.nodes: {rc.nodes} must be >= 1")
    if role != "trainer" and rc.nodes != 1:
        raise ConfigError(f"{key}.nodes: {rc.nodes}; an {role} array task runs one engine on one node, use 1")
    for name in ("partition", "account", "qos", "cpus_per_task", "constraint"):
        value = getattr(rc, name)
        if value is not None:
            params[name] = value
    if rc.cpus_per_task is not None:
        # srun of Slurm 22.05-23.02 does not inherit the job's --cpus-per-task: without it the role's
        # task would be bound to one CPU where tasks are bound to cores.
        params["srun_args"] = ["--cpus-per-task", str(rc.cpus_per_task)]
    if gpus(cfg, role):
        params["gpus_per_node"] = gpus(cfg, role)
    if rc.mem is not None:
        parse_mem_mb(rc.mem, f"{key}.mem")
        params["mem"] = rc.mem
    if rc.exclusive:
        params["exclusive"] = True
    if role != "trainer" and rc.array_parallelism is not None:
        params["array_parallelism"] = rc.array_parallelism
    return params


def server_parameters(cfg: Config, model: InferenceModelConfig, code_dir: Path | None) -> dict[str, Any]:
    """submitit SlurmExecutor parameters of shared auxiliary model `model`'s server array (one task per engine)."""
    params = executor_parameters(cfg, "server", code_dir, model.name)
    params.pop("gpus_per_node", None)
    if server_task_gpus(cfg, model):
        params["gpus_per_node"] = server_task_gpus(cfg, model)
    return params


def hetjob_explorer_parameters(cfg: Config, array_size: int) -> dict[str, Any]:
    """Parameters of the explorer component of a heterogeneous job: `array_size` tasks, resources per task.

    The job's time limit is `slurm.trainer.time`. Memory is given per CPU in both components
    (Slurm refuses `--mem` in one component and `--mem-per-cpu` in another), GPUs per task.
    """
    params = executor_parameters(cfg, "explorer", None)
    rc = cfg.slurm.explorer
    for name in ("ntasks_per_node", "setup", "stderr_to_stdout", "array_parallelism", "mem", "gpus_per_node",
                 "srun_args"):
        params.pop(name, None)
    params["job_name"] = f"{cfg.name}.hetjob"
    # One allocation: its components start and end together, on the trainer's time limit.
    params["time"] = parse_time_minutes(cfg.slurm.trainer.time, "slurm.trainer.time")
    params["nodes"] = f"1-{array_size}"
    params["additional_parameters"] = {**params["additional_parameters"], "ntasks": array_size}
    if gpus(cfg, "explorer"):
        params["gpus_per_task"] = gpus(cfg, "explorer")
    if rc.mem is not None:
        params["mem_per_cpu"] = _per_cpu(rc.mem, rc.cpus_per_task, "slurm.explorer.mem")
    return params


def hetjob_trainer_parameters(cfg: Config, code_dir: Path | None) -> dict[str, Any]:
    """Parameters of the trainer component (component 0, where the batch script runs) of a heterogeneous job."""
    params = executor_parameters(cfg, "trainer", code_dir)
    params["job_name"] = f"{cfg.name}.hetjob"
    # The batch script runs on the trainer's first node; srun passes its environment to every task.
    params["setup"] = setup_lines(cfg, ("trainer", "explorer"), code_dir)
    # One srun spans both components, each with its own CPUs per task: no single --cpus-per-task fits.
    params.pop("srun_args", None)
    rc = cfg.slurm.trainer
    if rc.mem is not None:
        params.pop("mem")
        params["mem_per_cpu"] = _per_cpu(rc.mem, rc.cpus_per_task, "slurm.trainer.mem")
    return params


def colocated_parameters(cfg: Config, code_dir: Path | None, array_size: int) -> dict[str, Any]:
    """Parameters of a colocated job: one node, the trainer's task and `array_size` explorer tasks on it,
    sharing the node's GPUs (the job's, `slurm.trainer.gpus_per_node`, which every task of the step sees; each
    explorer keeps a group of them, `RoleJob.child_env`). Time, CPUs per task and memory are the trainer's."""
    params = executor_parameters(cfg, "trainer", code_dir)
    params["job_name"] = f"{cfg.name}.colocated"
    params["setup"] = setup_lines(cfg, ("trainer", "explorer"), code_dir)
    params["nodes"] = 1
    params["ntasks_per_node"] = 1 + array_size
    return params


def _per_cpu(mem: str, cpus: int | None, key: str) -> str:
    return f"{math.ceil(parse_mem_mb(mem, key) / max(1, cpus or 1))}M"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_var_problems(cfg: Config, problems: Problems) -> None:
    """`explorer.env_vars` names variables a shell could set, and no credential (the config is stored
    in the run directory, readable by whoever reads it). A check of `rfthpc.config.validate`."""
    for name in cfg.explorer.env_vars:
        key = f"explorer.env_vars.{name}"
        if not _ENV_NAME.fullmatch(name):
            problems.add(f"{key}: not an environment variable name (letters, digits and _, not starting with a digit)")
        elif SECRET_PATTERN.search(name):
            problems.add(f"{key}: a credential would be stored in the run directory's config.yaml; export it in your "
                         "shell before `rfthpc submit` or `rfthpc run` instead (the roles inherit the environment)")
