"""srun + torchrun: the trainer's ranks on 1..N nodes, with the rendezvous taken from Slurm's environment.

srun starts one task per node; each runs torchrun with `--nnodes $SLURM_NNODES`, one rank per
GPU (one on a CPU-only node), and a c10d rendezvous on the first node of the allocation. The
rendezvous port is derived from the job id, so jobs sharing a host (or a restarted job whose old
port is still in TIME_WAIT) do not clash, and the first node is told explicitly that it hosts the
store (virtual nodes of one host all look like the host).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rfthpc.launch.slurmcli import run_slurm

SHUTDOWN_TIMEOUT_VAR = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
SHUTDOWN_TIMEOUT_S = 3600
"""How long torchrun lets its ranks stop after passing on SIGTERM (its default, 30 s, would SIGKILL
ranks in the middle of their checkpoint; Slurm's KillWait or a preemption's GraceTime bound the
stop instead)."""

# Below Linux's ephemeral range (32768-60999), so no outgoing connection holds the port.
PORT_BASE = 15000
PORT_SPAN = 10000


@dataclass(frozen=True)
class Rendezvous:
    """Where the trainer's nodes meet: node count, this node's index, the store's host:port, the run id."""

    nnodes: int
    node_rank: int
    host: str
    port: int
    run_id: str

    @property
    def endpoint(self) -> str:
        """`host:port` for torchrun's `--rdzv-endpoint`."""
        return f"{self.host}:{self.port}"


def rdzv_port(job_id: str, restart: int = 0) -> int:
    """A port in [15000, 25000) that depends only on the job id and how often the job was requeued."""
    digits = "".join(c for c in str(job_id) if c.isdigit()) or "0"
    # A requeued job moves to another port: the previous store's socket may linger in TIME_WAIT.
    return PORT_BASE + (int(digits) + 3571 * restart) % PORT_SPAN


def expand_nodelist(nodelist: str) -> list[str]:
    """Host names of a Slurm node list (`n[1-3],gpu7`), as `scontrol show hostnames` gives them."""
    if not any(c in nodelist for c in "[,"):
        return [nodelist]
    return run_slurm(["scontrol", "show", "hostnames", nodelist], timeout_s=30).stdout.split()


def node_address(node: str) -> str:
    """An address other nodes can reach `node` at: the name if it resolves, else Slurm's NodeAddr."""
    try:
        socket.getaddrinfo(node, None)
        return node
    except OSError:
        pass
    out = run_slurm(["scontrol", "show", "node", "-o", node], timeout_s=30).stdout
    for field in out.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    return node


def rendezvous_from_slurm(env: Mapping[str, str], hetjob: bool = False) -> Rendezvous:
    """The rendezvous of this trainer task from Slurm's environment (one task per node).

    In a heterogeneous job the trainer is component 0 and its tasks come first (SLURM_PROCID
    0..nodes-1 across the spanning step).
    """
    suffix = "_HET_GROUP_0" if hetjob else ""
    nodelist = env[f"SLURM_JOB_NODELIST{suffix}"]
    nnodes = int(env.get(f"SLURM_JOB_NUM_NODES{suffix}") or len(expand_nodelist(nodelist)))
    job_id = env["SLURM_JOB_ID"]
    restart = int(env.get("SLURM_RESTART_COUNT") or 0)
    return Rendezvous(
        nnodes=nnodes,
        node_rank=int(env.get("SLURM_PROCID", "0")),
        host=node_address(expand_nodelist(nodelist)[0]),
        port=rdzv_port(job_id, restart),
        run_id=f"rfthpc-{job_id}-{restart}",
    )


def torchrun_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a torchrun launch: its shutdown timeout raised to SHUTDOWN_TIMEOUT_S unless set."""
    return {**env, SHUTDOWN_TIMEOUT_VAR: env.get(SHUTDOWN_TIMEOUT_VAR, str(SHUTDOWN_TIMEOUT_S))}


def torchrun_argv(python: str, rdzv: Rendezvous, nproc_per_node: int, module_args: Sequence[str]) -> list[str]:
    """`python -m torch.distributed.run ... -m <module_args>` for one node of the trainer."""
    return [
        python, "-m", "torch.distributed.run",
        "--nnodes", str(rdzv.nnodes),
        "--nproc-per-node", str(nproc_per_node),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", rdzv.endpoint,
        "--rdzv-id", rdzv.run_id,
        "--rdzv-conf", f"is_host={1 if rdzv.node_rank == 0 else 0}",
        "--max-restarts", "0",
        "-m", *module_args,
    ]
