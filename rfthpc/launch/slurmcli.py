"""Bounded calls of Slurm's command-line tools, and their failures as user errors.

Every call has a timeout: a hung controller must never hang `rfthpc submit`, `status` or
`cancel`. A missing Slurm or an unreachable controller becomes a `SlurmError` that points to
`rfthpc run` (the same roles as local processes); an sbatch rejection names the config key that
caused it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from rfthpc.errors import SlurmError

DEFAULT_TIMEOUT_S = 30.0
RUN_LOCALLY_HINT = "to run without Slurm, use `rfthpc run --config FILE` (the same roles as local processes)"

# sbatch's rejection messages (Slurm 22.05 and later) and the `slurm.<role>` keys that cause them.
_REJECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("invalid partition", ("partition",)),
    ("invalid account", ("account", "partition")),
    ("qos", ("qos",)),
    ("generic resource", ("gpus_per_node",)),
    ("gres", ("gpus_per_node",)),
    ("invalid feature", ("constraint",)),
    ("time limit", ("time",)),
    ("memory", ("mem",)),
    ("node count", ("nodes",)),
    ("node configuration is not available", ("nodes", "cpus_per_task", "mem", "gpus_per_node", "constraint")),
    ("more processors than permitted", ("cpus_per_task",)),
    ("cpu count", ("cpus_per_task",)),
    ("reservation", ("additional_parameters",)),
)

_UNREACHABLE = ("unable to contact slurm controller", "connection refused", "connect failure",
                "socket timed out", "slurm_load_jobs error: unable to contact")


def require_tool(tool: str) -> str:
    """Path of a Slurm tool, or a SlurmError saying Slurm is not installed here."""
    path = shutil.which(tool)
    if path is None:
        raise SlurmError(f"Slurm's `{tool}` is not on PATH: this machine is not a Slurm login node; {RUN_LOCALLY_HINT}")
    return path


def unreachable(reason: str) -> SlurmError:
    """The error for a Slurm controller that does not answer, with Slurm's own words."""
    return SlurmError(f"the Slurm controller is unreachable ({reason}); check `scontrol ping`, or {RUN_LOCALLY_HINT}")


def is_unreachable(stderr: str) -> bool:
    """True if a Slurm tool's error output says the controller cannot be reached."""
    low = stderr.lower()
    return any(s in low for s in _UNREACHABLE)


def run_slurm(args: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
              check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a Slurm tool with a timeout; raise SlurmError if it is missing, hangs, or (with `check`) fails."""
    require_tool(args[0])
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"`{' '.join(args[:2])} ...` did not answer within {timeout_s:.0f} s: the Slurm controller is "
            f"overloaded or unreachable; check `scontrol ping`, or {RUN_LOCALLY_HINT}"
        ) from None
    if done.returncode != 0 and is_unreachable(done.stderr):
        raise unreachable(first_line(done.stderr))
    if check and done.returncode != 0:
        raise SlurmError(f"`{' '.join(args)}` failed: {first_line(done.stderr) or f'exit code {done.returncode}'}")
    return done


def check_controller(timeout_s: float = 20.0) -> None:
    """Raise a SlurmError unless sbatch exists and the controller answers `scontrol ping`."""
    require_tool("sbatch")
    done = run_slurm(["scontrol", "ping"], timeout_s=timeout_s, check=False)
    if done.returncode != 0 or ("DOWN" in done.stdout and "UP" not in done.stdout):
        raise unreachable(first_line(done.stderr) or first_line(done.stdout))


def first_line(text: str) -> str:
    """The first non-empty line of a tool's output, without Slurm's `sbatch: error:` prefixes."""
    for line in text.splitlines():
        line = line.strip()
        for prefix in ("sbatch: error: ", "srun: error: ", "scancel: error: ", "error: "):
            line = line.removeprefix(prefix)
        if line:
            return line
    return ""


def sbatch_rejection(message: str, keys_of_role: dict[str, str]) -> SlurmError:
    """A SlurmError for an sbatch rejection, naming the config keys that may cause it.

    `keys_of_role` maps a resource field (`partition`) to its config key for the rejected role
    (`slurm.trainer.partition = gpu`); only keys the config sets are named.
    """
    if is_unreachable(message):
        return unreachable(first_line(message))
    reason = "; ".join(
        line.strip().removeprefix("sbatch: error: ")
        for line in message.splitlines()
        if line.strip() and "pmix" not in line.lower()
    ) or "no message"
    low = reason.lower()
    keys: list[str] = []
    for needle, fields in _REJECTIONS:
        if needle in low:
            keys += [keys_of_role[f] for f in fields if f in keys_of_role and keys_of_role[f] not in keys]
            if keys:
                break
    where = f"; check {', '.join(keys)}" if keys else "; check the `slurm` section of your config"
    return SlurmError(f"sbatch rejected the job: {reason}{where} (see `sinfo`, `sacctmgr show assoc user=$USER`)")
