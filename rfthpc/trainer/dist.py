"""The trainer's process group: from torchrun, from a bare `srun`, or a group of one.

Rendezvous, in order of precedence:
- torchrun (or anything setting RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT): `env://`;
- `srun` with several tasks and no torchrun: rank, world size and local rank from SLURM_PROCID,
  SLURM_NTASKS and SLURM_LOCALID; the master is the first node of the job (port from the job id
  unless MASTER_PORT is set);
- a single process: an in-memory store, so no port is needed.

NCCL on GPU, gloo on CPU. Every rank runs the same code; rank 0 alone reads the store, writes
files and logs metrics, and hands data to the others through `broadcast_object`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist

from rfthpc.errors import UserError
from rfthpc.launch.torchrun import rdzv_port

if TYPE_CHECKING:
    from rfthpc.trainer.sequence_parallel import SequenceGroup

T = TypeVar("T")

# Collectives of a step include a checkpoint write of a large model; be generous.
_TIMEOUT = timedelta(minutes=60)


@dataclass
class DistEnv:
    """This process's place in the trainer's process group."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    sequence: SequenceGroup | None = None
    """The sequence-parallel group this rank splits sequences with (`sequence_parallel`); None: none."""

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that reads the store and writes the run directory."""
        return self.rank == 0

    @property
    def dp_rank(self) -> int:
        """This rank's data-parallel replica: which share of a batch it trains on."""
        return self.rank if self.sequence is None else self.sequence.dp_rank

    @property
    def dp_size(self) -> int:
        """Data-parallel replicas: the ranks, or their sequence-parallel groups."""
        return self.world_size if self.sequence is None else self.sequence.dp_size

    def broadcast_object(self, obj: Any = None, src: int = 0) -> Any:
        """Return rank `src`'s `obj` on every rank (pickled; for batches and small decisions)."""
        box = [obj if self.rank == src else None]
        dist.broadcast_object_list(box, src=src, device=self._object_device())
        return box[0]

    def on_main(self, fn: Callable[[], T]) -> T:
        """`fn()` run on rank 0, its result on every rank. An exception there is raised on every rank
        too (rank 0's own, with its traceback; elsewhere a UserError for a user error, else a
        RuntimeError): no rank is left waiting in the broadcast for a rank that failed."""
        result: Any = None
        failure: tuple[bool, str] | None = None
        error: BaseException | None = None
        if self.is_main:
            try:
                result = fn()
            except Exception as e:  # noqa: BLE001 — re-raised below, after telling the other ranks
                error, failure = e, (isinstance(e, UserError), str(e) if isinstance(e, UserError) else repr(e))
        result, failure = self.broadcast_object((result, failure))
        if error is not None:
            raise error
        if failure is not None:
            user_error, message = failure
            raise UserError(message) if user_error else RuntimeError(f"rank 0 failed: {message}")
        return result

    def all_gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def any(self, flag: bool) -> bool:
        """True on every rank if `flag` is true on any rank."""
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of `values` over the ranks (float64)."""
        if not values:
            return []
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def barrier(self) -> None:
        """Wait until every rank gets here."""
        dist.barrier()

    def _object_device(self) -> torch.device | None:
        return self.device if self.backend == "nccl" else None

    def close(self, synchronised: bool = False) -> None:
        """Leave the process group.

        `synchronised`: every rank ends here the same way (the trainer's exits are decided
        collectively), so they first meet in a final barrier: no rank tears the group down while
        another is still in a collective or writing its last checkpoint. After a failure on one
        rank there is no barrier (the others may never come).
        """
        if not dist.is_initialized():
            return
        if synchronised:
            dist.barrier()
        dist.destroy_process_group()


def _first_slurm_node() -> str:
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise UserError(
            "the trainer runs under srun with several tasks but SLURM_JOB_NODELIST is unset; "
            "set MASTER_ADDR to the first node's address or launch with torchrun"
        )
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise UserError(
            f"cannot expand SLURM_JOB_NODELIST={nodelist!r} with `scontrol show hostnames` ({e}); "
            "set MASTER_ADDR to the first node's address"
        ) from None
    return out.stdout.split()[0]


def _rendezvous_env() -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) if this process is one of several, exporting what env:// needs."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        rank, world, local = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", "0"))
        if "MASTER_ADDR" not in env:
            env["MASTER_ADDR"] = _first_slurm_node()
        # The job id keeps concurrent trainer jobs on one node from colliding on a port, the restart
        # count a requeued job from its predecessor's port in TIME_WAIT (as torchrun's rendezvous).
        env.setdefault("MASTER_PORT", str(rdzv_port(env.get("SLURM_JOB_ID", "0"),
                                                     int(env.get("SLURM_RESTART_COUNT") or 0))))
        env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"] = str(rank), str(world), str(local)
        return rank, world, local
    return None


def init_distributed() -> DistEnv:
    """Join (or create) the trainer's process group and pick this rank's device."""
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    placed = _rendezvous_env()
    rank, world, local = placed if placed is not None else (0, 1, 0)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        if placed is None:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=_TIMEOUT)
        else:
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world, timeout=_TIMEOUT,
                                    device_id=device if cuda else None)
    return DistEnv(rank=rank, world_size=world, local_rank=local, device=device, backend=backend)
