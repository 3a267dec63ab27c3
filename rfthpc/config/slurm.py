"""`slurm` section (rfthpc's own): resources of each role and how jobs are laid out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional


@dataclass
class SlurmRoleConfig:
    """Slurm resources of one role. Unset values are left to the cluster's defaults."""

    partition: Optional[str] = None
    """Partition (`--partition`)."""
    account: Optional[str] = None
    """Account charged (`--account`)."""
    qos: Optional[str] = None
    """Quality of service (`--qos`)."""
    time: str = "24:00:00"
    """Time limit per job (`--time`, e.g. 2-00:00:00); the job resumes after it, from its checkpoint."""
    nodes: int = 1
    """Nodes per job (trainer) or per array task (explorer)."""
    gpus_per_node: Optional[int] = None
    """GPUs per node; defaults to what the `cluster`/`explorer` settings give this role."""
    cpus_per_task: Optional[int] = None
    """CPUs for each task (one task per node)."""
    mem: Optional[str] = None
    """Memory per node (`--mem`, e.g. 200G)."""
    constraint: Optional[str] = None
    """Node features (`--constraint`)."""
    exclusive: bool = False
    """Whole nodes (`--exclusive`)."""
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    """Any other sbatch option, e.g. {reservation: myres, mail-type: END}."""
    setup: list[str] = field(default_factory=list)
    """Shell lines run before the role starts (module load, source venv, exports)."""
    array_size: Optional[int] = None
    """Explorer only: array tasks; defaults to `explorer.rollout_model.engine_num`."""
    array_parallelism: Optional[int] = None
    """Explorer only: array tasks running at once (`%N`)."""


@dataclass
class SlurmConfig:
    """How `rfthpc submit` lays out the run on Slurm."""

    executor: Literal["slurm", "local"] = "slurm"
    """slurm: `rfthpc submit` queues jobs; local: it runs the roles as local processes like `rfthpc run`."""
    layout: Literal["separate", "hetjob", "colocated"] = "separate"
    """separate: a trainer job and an explorer array; hetjob: one heterogeneous job holding both; colocated: one
    job on one node whose GPUs the trainer and the explorers share (docs/slurm.md, "One node, few GPUs")."""
    python: Optional[str] = None
    """Python on the compute nodes; defaults to the submitting interpreter."""
    setup: list[str] = field(default_factory=list)
    """Shell lines run before every role."""
    signal_delay_s: int = 120
    """Seconds before the time limit when Slurm sends USR2 (checkpoint and requeue)."""
    max_requeues: int = 10
    """Preemptions/time-outs after which a job is not requeued again."""
    snapshot_code: bool = True
    """Queued jobs run a copy of rfthpc taken at submit, immune to later edits."""
    trainer: SlurmRoleConfig = field(default_factory=SlurmRoleConfig)
    """Trainer job resources."""
    explorer: SlurmRoleConfig = field(default_factory=SlurmRoleConfig)
    """Explorer array resources (per array task)."""
    server: SlurmRoleConfig = field(default_factory=SlurmRoleConfig)
    """Resources of the server job of each auxiliary model with `placement: shared`: a job array, one
    task per engine (`engine_num`); `gpus_per_node` defaults to the model's `tensor_parallel_size`.
    `array_size` is refused (the array has `engine_num` tasks). The job ends when the run needs it no more."""


@dataclass
class FilesystemConfig:
    """How the run directory is shared (rfthpc's own section)."""

    lock_type: Literal["link", "strict-soft", "soft", "flock", "lockf"] = "link"
    """Lock for task claims: link (a marker hard-linked onto the lock name, safe on NFS/Lustre/GPFS and
    cheap: 3 metadata operations), strict-soft (filelock's ordered hard-link claims: first come, first
    served, ~40 operations), soft (O_EXCL marker), flock (node-local on many parallel filesystems),
    lockf (POSIX, coherent on GPFS)."""
    share_group: Optional[str] = None
    """Unix group that may read and write the run directory (None: private to you)."""
    lease_s: float = 300.0
    """Seconds without a heartbeat after which a dead explorer's task claims return to the pool and its
    reader file stops keeping old published weights (locks use their own fixed staleness)."""
    poll_interval_s: float = 1.0
    """Longest time in seconds between polls of the run directory (experience, task claims) while a
    role waits; the trainer notices a committed chunk sooner, through the store's doorbell."""
    keep_consumed_chunks: bool = False
    """Keep experience chunks after the trainer consumed them (by default each checkpoint deletes them):
    a record of every group trained on, for auditing or offline analysis; the store then grows by the
    whole run's experience. `rfthpc store gc` still deletes them when asked."""
    weight_stripe_count: int = 0
    """Lustre stripe count of published weight files (`lfs setstripe -c`), so one large snapshot spreads
    over that many storage targets; 0 keeps the directory's default layout (and on filesystems without
    `lfs` nothing is done). -1 stripes over every target."""
    staging_dir: str = ""
    """Node-local directory where explorers stage the next policy version before loading it (one
    model copy per explorer process, two while the next is prefetched), and where a trainer sharing
    its node with explorers (`slurm.layout: colocated`, `rfthpc run`) leaves its newest two versions
    for them; empty: /dev/shm (memory) where it exists, else the temporary directory."""
