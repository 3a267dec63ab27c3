"""The callable submitit runs in every Slurm task: start the role's command, requeue on a warning.

`RoleJob` runs `rfthpc train` (directly, or under torchrun when the trainer has several ranks),
`rfthpc explore` or `rfthpc serve` (an engine of a shared auxiliary model) as a child process and
waits for it. The run directory holds all state, so
the callable itself is stateless and a requeued job simply runs it again.

Signals: Slurm delivers its warning (`--signal=USR2@slurm.signal_delay_s`, preemption) and its
SIGTERM (scancel, requeue) to every process of the step, so the role sees them itself and stops
cleanly (trainer: checkpoint; explorer: commit or release claims) with exit code 124. torchrun is
started with USR2 ignored: its default action would kill it before its ranks have checkpointed
(the ranks install their own handler). After a warning, the first task asks submitit to requeue
the job (submitit's Checkpointable path: `scontrol requeue`), up to `slurm.max_requeues`
restarts; a SIGTERM alone (scancel, an external requeue, preemption) leaves the decision to Slurm.
In a heterogeneous job the requeue ends the explorers' tasks too, so the first task waits (up to
a minute) until each explorer task has said it stopped (`slurm/stopped/<job>.<restart>/`), having
released its claims, before it requeues.
Any other non-zero exit code fails the task (RoleFailed, with the role's output above it in the log).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Literal

from submitit.helpers import Checkpointable

import rfthpc
from rfthpc.errors import EXIT_PREEMPTED
from rfthpc.launch.torchrun import rendezvous_from_slurm, torchrun_argv, torchrun_env
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import make_dirs

JobKind = Literal["trainer", "explorer", "hetjob", "colocated", "server"]
ONE_JOB: tuple[JobKind, ...] = ("hetjob", "colocated")
"""The kinds whose one job runs the trainer and explorers (a task's role follows from its SLURM_PROCID)."""


class RoleFailed(RuntimeError):
    """The role's process failed (its log above says why)."""


class RoleStopped(RuntimeError):
    """The role stopped for a requeue that does not happen (too many restarts, or no submitit job)."""


# How long a hetjob's first task waits for its explorer tasks to stop before it requeues the job.
EXPLORERS_STOP_WAIT_S = 60.0


def _log(message: str) -> None:
    print(f"rfthpc launch: {message}", file=sys.stderr, flush=True)


def _ignore_usr2() -> None:
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


@dataclass
class RoleJob(Checkpointable):
    """What one Slurm task of a run executes (pickled by submitit at submit time)."""

    run_dir: str
    """Absolute run directory."""
    kind: JobKind
    """trainer job, explorer array, a heterogeneous job holding both, or a shared auxiliary model's server array."""
    python: str
    """Python on the compute nodes."""
    max_requeues: int
    """Restarts after which a warned job is not requeued again (`slurm.max_requeues`)."""
    explorer: str | None = None
    """Explorer name (explorer arrays and hetjobs; a server array: the explorer array whose config it reads)."""
    rank: int | None = None
    """Explorer rank (server: engine index) of an array task (default: $SLURM_ARRAY_TASK_ID)."""
    server: str | None = None
    """The auxiliary model a server array serves."""
    trainer_nodes: int = 1
    """Trainer nodes (= the first tasks of a hetjob)."""
    nproc_per_node: int = 1
    """Trainer ranks per node."""
    explorer_gpus: int = 0
    """A colocated job: the GPUs of each explorer, a group of the node's (0: none, CPU)."""
    time_share_gpus: bool = False
    """A colocated job in sleep mode (`explorer.rollout_model.enable_sleep_mode`): its roles take turns on the GPUs."""

    def task_role(self, env: Mapping[str, str]) -> tuple[str, int]:
        """("trainer", node index), ("explorer", explorer rank) or ("server", engine index) of this Slurm task."""
        procid = int(env.get("SLURM_PROCID", "0"))
        if self.kind == "trainer":
            return "trainer", procid
        if self.kind in ("explorer", "server"):
            return self.kind, self.rank if self.rank is not None else int(env.get("SLURM_ARRAY_TASK_ID", "0"))
        if procid < self.trainer_nodes:
            return "trainer", procid
        return "explorer", procid - self.trainer_nodes

    def command(self, env: Mapping[str, str]) -> list[str]:
        """The role's command line for this task."""
        role, index = self.task_role(env)
        if role == "server":
            return [self.python, "-m", "rfthpc", "serve", "--run-dir", self.run_dir, "--model", str(self.server),
                    "--engine", str(index), *(["--explorer", self.explorer] if self.explorer else [])]
        # A colocated job's explorers share the trainer's GPUs: in sleep mode the two take turns on them.
        shares = ["--time-share-gpus"] if self.kind == "colocated" and self.time_share_gpus else []
        if role == "explorer":
            return [self.python, "-m", "rfthpc", "explore", "--run-dir", self.run_dir,
                    "--name", str(self.explorer), "--rank", str(index), *shares]
        # A colocated job's explorers share the trainer's node: they load its versions from node-local memory.
        args = ["rfthpc", "train", "--run-dir", self.run_dir, *(["--node-local-weights"] if self.kind == "colocated"
                                                                 else []), *shares]
        if self.trainer_nodes * self.nproc_per_node == 1:
            return [self.python, "-m", *args]
        rdzv = rendezvous_from_slurm(env, hetjob=self.kind == "hetjob")
        return torchrun_argv(self.python, rdzv, self.nproc_per_node, args)

    def child_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The role's environment: this task's, with the task count of its own role and, in a colocated
        job, an explorer's own group of the node's GPUs.

        In a heterogeneous or colocated job the step spans trainer and explorers, so SLURM_NTASKS counts
        both; the trainer reads it (without torchrun) as its world size, so it must see its own tasks only.
        Every task of a colocated job sees all the node's GPUs: the trainer uses them all, explorer k the
        k-th group of `explorer_gpus`.
        """
        out = dict(env)
        role, index = self.task_role(env)
        if self.kind in ONE_JOB and role == "trainer":
            out["SLURM_NTASKS"] = str(self.trainer_nodes)
        visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        if self.kind == "colocated" and role == "explorer" and self.explorer_gpus and visible:
            group = visible[index * self.explorer_gpus:(index + 1) * self.explorer_gpus]
            out["CUDA_VISIBLE_DEVICES"] = ",".join(group or visible[:self.explorer_gpus])
        return out

    def __call__(self) -> str:
        env = self.child_env(os.environ)
        role, index = self.task_role(env)
        argv = self.command(env)
        uses_torchrun = "torch.distributed.run" in argv
        warned: list[int] = []
        previous = signal.getsignal(signal.SIGUSR2)

        def on_warning(signum: int, frame: FrameType | None) -> None:
            # Only note it: the role got the same signal from Slurm and is checkpointing.
            warned.append(signum)
            _log(f"{role} {index}: got {signal.Signals(signum).name}; waiting for it to stop cleanly")

        terminated: list[int] = []
        signal.signal(signal.SIGUSR2, on_warning)
        previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: terminated.append(signum))
        code_dir = Path(rfthpc.__file__).resolve().parent.parent
        gpus = f", GPUs {env['CUDA_VISIBLE_DEVICES']}" if env.get("CUDA_VISIBLE_DEVICES") else ""
        _log(f"{role} {index} (restart {env.get('SLURM_RESTART_COUNT', '0')}, code {code_dir}{gpus}): "
             f"{shlex.join(argv)}")
        if uses_torchrun:
            env = torchrun_env(env)
        # preexec_fn is safe here: this wrapper process runs no threads.
        child = subprocess.Popen(argv, env=env, preexec_fn=_ignore_usr2 if uses_torchrun else None)  # noqa: PLW1509
        try:
            code = child.wait()
        finally:
            signal.signal(signal.SIGTERM, previous_term)
        _log(f"{role} {index} exited with code {code}")
        if self.kind in ONE_JOB and role == "explorer":
            self._mark_stopped(env)
        if code == 0:
            return f"{role} {index} done"
        if warned:
            return self._requeue(env, role, index, previous, int(os.environ.get("SLURM_NTASKS", "1")))
        # torchrun exits 1 after passing SIGTERM on, even when every rank saved and stopped cleanly.
        if code in (EXIT_PREEMPTED, -signal.SIGTERM) or (terminated and uses_torchrun):
            # scancel, an external `scontrol requeue` or a preemption: Slurm ends or requeues the job itself.
            how = "cleanly" if code == EXIT_PREEMPTED else "(killed by it)"
            _log(f"{role} {index} stopped {how} on SIGTERM; Slurm cancels or requeues this job")
            return f"{role} {index} stopped"
        raise RoleFailed(f"{role} {index} failed with exit code {code}; its output is above in this log")

    def _stopped_dir(self, env: Mapping[str, str]) -> Path:
        """Where this attempt's explorer tasks of a hetjob say they stopped."""
        attempt = f"{env.get('SLURM_JOB_ID', 'nojob')}.{env.get('SLURM_RESTART_COUNT') or 0}"
        return RunDir(self.run_dir).slurm / "stopped" / attempt

    def _mark_stopped(self, env: Mapping[str, str]) -> None:
        """Tell the hetjob's first task that this explorer task has stopped (its claims are released)."""
        try:
            (make_dirs(self._stopped_dir(env)) / env.get("SLURM_PROCID", "0")).touch()
        except OSError as e:
            _log(f"cannot record that this explorer task stopped ({e}); the job's requeue waits for it a minute")

    def _wait_for_explorers(self, env: Mapping[str, str], step_tasks: int) -> None:
        """Wait up to EXPLORERS_STOP_WAIT_S until every explorer task of this hetjob attempt has stopped."""
        expected = step_tasks - self.trainer_nodes
        where = self._stopped_dir(env)
        deadline = time.monotonic() + EXPLORERS_STOP_WAIT_S
        while True:
            stopped = len(list(where.iterdir())) if where.is_dir() else 0
            if stopped >= expected:
                break
            if time.monotonic() >= deadline:
                _log(f"{expected - stopped} of {expected} explorer task(s) still running after "
                     f"{EXPLORERS_STOP_WAIT_S:.0f} s; requeueing anyway (the requeued attempt takes their claims back)")
                break
            time.sleep(0.5)
        shutil.rmtree(where, ignore_errors=True)

    def _requeue(
        self, env: Mapping[str, str], role: str, index: int, submitit_handler: object, step_tasks: int
    ) -> str:
        if int(env.get("SLURM_PROCID", "0")) != 0:
            return f"{role} {index} stopped for a requeue (the job's first task requeues it)"
        restarts = int(env.get("SLURM_RESTART_COUNT") or 0)
        if restarts >= self.max_requeues:
            raise RoleStopped(
                f"{role} {index}: not requeued: the job already restarted {restarts} times "
                f"(slurm.max_requeues = {self.max_requeues}); resubmit with `rfthpc submit` to continue"
            )
        if not callable(submitit_handler):
            raise RoleStopped(f"{role} {index} stopped on a warning outside a submitit job; nothing requeues it")
        job = env.get("SLURM_JOB_ID")
        if env.get("SLURM_ARRAY_JOB_ID"):
            job = f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID')}"
        if self.kind in ONE_JOB:
            self._wait_for_explorers(env, step_tasks)
        _log(f"requeueing job {job} (restart {restarts + 1} of at most {self.max_requeues})")
        handler: Callable[[int, FrameType | None], None] = submitit_handler  # type: ignore[assignment]
        # submitit's handler calls checkpoint() (this callable again), runs `scontrol requeue` and exits.
        handler(signal.SIGUSR2, None)
        return f"{role} {index} requeued"
