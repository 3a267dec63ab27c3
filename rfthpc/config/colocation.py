"""`slurm.layout: colocated` checked before a run: one job on one node, the trainer on all its GPUs and each
explorer's engines on a group of them, so both must fit in each GPU's memory at once.

The estimate, per GPU, in GiB (`colocation_estimate`, shown by `config show`):
- the trainer: the policy's parameters P sharded over the node's G GPUs (FSDP): weights and gradients in the
  training dtype (b bytes each) and Adam's two fp32 moments, P (2b + 8) / G; with LoRA the frozen weights
  only, P b / G; a reference model (a KL term without LoRA) adds P b / G; plus `WORKSPACE_GIB` for
  activations and the CUDA context;
- the rollout engine: what vLLM claims, `gpu_memory_utilization` x the GPU's memory (its weights, P b / tp,
  must fit in that claim, with its KV cache in the rest).
Where the two do not fit together but each fits beside what the other keeps while it waits
(`SLEEPING_GIB`), the GPUs are time-shared (`explorer.rollout_model.enable_sleep_mode`, chosen here when it is
left unset: `sleep_mode`): the engine sleeps while the trainer steps, the trainer's state moves to CPU memory
while the engine generates (rfthpc.engines.time_sharing). A run that fits neither way is refused naming the
figures and the largest `gpu_memory_utilization` that would fit.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from rfthpc.algorithms.presets import needs_reference
from rfthpc.config.schema import Config

WORKSPACE_GIB = 3.0
"""Per GPU, besides the trainer's parameters and optimizer state: activations, CUDA contexts, allocator slack."""
SLEEPING_GIB = 2.0
"""Per GPU, what the side that waits its turn still holds: its CUDA context, vLLM's CUDA graphs, allocator slack."""
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "auto": 2}
_GIB = 1024 ** 3


def colocated(cfg: Config) -> bool:
    """Whether the trainer and the explorers share one job's GPUs (`slurm.layout: colocated`, both roles)."""
    return cfg.slurm.layout == "colocated" and cfg.mode == "both"


def parameter_count(model_dir: Path) -> int | None:
    """Parameters of the model in `model_dir`, from its safetensors headers (nothing loaded); None if it has
    none to read."""
    files = sorted(Path(model_dir).expanduser().glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


@dataclass(frozen=True)
class Estimate:
    """What one GPU of a colocated job holds, in GiB."""

    gpu_gib: float
    trainer_gib: float
    engine_gib: float
    engine_weights_gib: float
    parameters: int

    @property
    def fits(self) -> bool:
        """Both parts fit at once, and the engine's weights fit in its claim."""
        return self.trainer_gib + self.engine_gib <= self.gpu_gib and self.engine_weights_gib < self.engine_gib

    @property
    def fits_alone(self) -> bool:
        """Each part fits while the other sleeps (time-sharing the GPUs), and the engine's weights fit in its claim."""
        return (self.trainer_gib + SLEEPING_GIB <= self.gpu_gib and self.engine_gib + SLEEPING_GIB <= self.gpu_gib
                and self.engine_weights_gib < self.engine_gib)

    def most_utilization(self) -> float:
        """The largest `gpu_memory_utilization` that leaves the trainer its share (may be below what vLLM needs)."""
        return max(0.0, math.floor((self.gpu_gib - self.trainer_gib) / self.gpu_gib * 100) / 100)

    def describe(self) -> str:
        """One line for `config show`."""
        return (f"colocated on GPUs of {self.gpu_gib:g} GiB: trainer ~{self.trainer_gib:.1f} GiB per GPU "
                f"({self.parameters / 1e9:.2f}B parameters), rollout engine {self.engine_gib:.1f} GiB "
                f"(gpu_memory_utilization; its weights {self.engine_weights_gib:.1f} GiB)")


def colocation_estimate(cfg: Config) -> Estimate | None:
    """The estimate of a colocated run, None without `cluster.gpu_memory_gb` or a readable model."""
    memory = cfg.cluster.gpu_memory_gb
    if not colocated(cfg) or memory is None or not cfg.model.model_path:
        return None
    count = parameter_count(Path(cfg.model.model_path))
    if count is None:
        return None
    rm = cfg.explorer.rollout_model
    b = _DTYPE_BYTES.get(cfg.model.dtype, 2)
    gpus = max(1, cfg.cluster.gpu_per_node)
    lora = cfg.model.lora is not None
    per_param = b if lora else 2 * b + 8
    if not lora and needs_reference(cfg.algorithm.kl_penalty_fn or "none", cfg.algorithm.kl_loss_fn or "none"):
        per_param += b
    trainer = count * per_param / gpus / _GIB + WORKSPACE_GIB
    engine_b = _DTYPE_BYTES.get(rm.dtype, b)
    return Estimate(gpu_gib=memory, trainer_gib=trainer, engine_gib=rm.gpu_memory_utilization * memory,
                    engine_weights_gib=count * engine_b / rm.tensor_parallel_size / _GIB, parameters=count)


def sleep_mode(cfg: Config) -> bool:
    """Whether the run time-shares its GPUs: `explorer.rollout_model.enable_sleep_mode` as set, else on for a
    colocated run whose trainer and engine fit one at a time but not together (by the estimate)."""
    chosen = cfg.explorer.rollout_model.enable_sleep_mode
    if chosen is not None:
        return chosen
    estimate = colocation_estimate(cfg)
    return estimate is not None and not estimate.fits and estimate.fits_alone


def colocation_note(cfg: Config) -> str | None:
    """What `config show` says of a colocated run's memory: the estimate, or that it is not checked."""
    if not colocated(cfg):
        return None
    estimate = colocation_estimate(cfg)
    if estimate is not None:
        shared = "; time-sharing the GPUs (enable_sleep_mode)" if cfg.explorer.rollout_model.enable_sleep_mode else ""
        return estimate.describe() + shared
    if cfg.cluster.gpu_per_node <= 0:
        return None
    return (f"slurm.layout colocated: the rollout engine takes gpu_memory_utilization "
            f"{cfg.explorer.rollout_model.gpu_memory_utilization} of each GPU and the trainer needs the rest; set "
            "cluster.gpu_memory_gb (the memory of one GPU) to have validation check that both fit")


def colocation_problems(cfg: Config, explorer_task_gpus: int, server_gpus: int) -> list[str]:
    """What keeps a colocated run from its one node: its shape (one trainer node holding every explorer's
    engines) and, where the GPUs' memory is given, the memory estimate."""
    c, rm = cfg.cluster, cfg.explorer.rollout_model
    out = []
    if cfg.slurm.trainer.nodes != 1:
        out.append(f"slurm.trainer.nodes: {cfg.slurm.trainer.nodes}; slurm.layout colocated runs the trainer and the "
                   "explorers in one job on one node: use 1 (or slurm.layout separate for a trainer on several nodes)")
    if c.gpu_per_node > 0 and rm.engine_num * explorer_task_gpus > c.gpu_per_node:
        out.append(f"explorer.rollout_model.engine_num: {rm.engine_num} engines x {explorer_task_gpus} GPUs do not fit "
                   f"on the colocated node's {c.gpu_per_node} GPUs (each explorer takes a group of its own, shared "
                   "with the trainer); lower engine_num or tensor_parallel_size")
    if c.gpu_per_node > 0 and server_gpus > (c.node_num - 1) * c.gpu_per_node:
        out.append(f"cluster.node_num: {c.node_num}; the shared auxiliary models' servers need {server_gpus} GPUs on "
                   "nodes of their own besides the colocated one: raise cluster.node_num")
    estimate = colocation_estimate(cfg)
    sharing = bool(rm.enable_sleep_mode)
    if estimate is not None and not (estimate.fits_alone if sharing else estimate.fits):
        if estimate.engine_weights_gib >= estimate.engine_gib:
            out.append(f"explorer.rollout_model.gpu_memory_utilization: {rm.gpu_memory_utilization} x "
                       f"{estimate.gpu_gib:g} GiB = {estimate.engine_gib:.1f} GiB cannot hold the engine's weights "
                       f"({estimate.engine_weights_gib:.1f} GiB) and a KV cache; {estimate.describe()}: raise it, or "
                       "use more GPUs per engine (tensor_parallel_size)")
        elif sharing:
            out.append(f"cluster.gpu_memory_gb: {estimate.describe()}: time-sharing the GPUs, each part needs its "
                       f"share beside the {SLEEPING_GIB:g} GiB the other keeps while it sleeps, and "
                       f"{max(estimate.trainer_gib, estimate.engine_gib) + SLEEPING_GIB:.1f} GiB do not fit in "
                       f"{estimate.gpu_gib:g} GiB; train with LoRA (model.lora), use more GPUs (the trainer's share "
                       "shrinks with each), or lower explorer.rollout_model.gpu_memory_utilization")
        else:
            both = estimate.trainer_gib + estimate.engine_gib
            alone = (" (they would fit one at a time: leave explorer.rollout_model.enable_sleep_mode unset or set "
                     "it true to time-share the GPUs)") if estimate.fits_alone else ""
            out.append(f"cluster.gpu_memory_gb: {estimate.describe()}: {both:.1f} GiB do not fit in "
                       f"{estimate.gpu_gib:g} GiB{alone}; lower explorer.rollout_model.gpu_memory_utilization to at "
                       f"most {estimate.most_utilization():.2f} (if the engine's weights and a KV cache fit there), "
                       "train with LoRA (model.lora), or use more GPUs (the trainer's share shrinks with each)")
    return out
