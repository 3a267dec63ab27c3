"""Which GPUs each engine of an explorer uses: consecutive slices of the GPUs its task was given.

An explorer task gets the rollout model's `tensor_parallel_size` GPUs plus each auxiliary model's
(`rfthpc.config.derive.explorer_task_gpus`), but a vLLM engine runs on the first GPUs it sees. vLLM
runs the model in processes it starts while the `LLM` is built (the EngineCore process, and with
tensor parallelism its workers, which use local ranks 0..tp-1 of the devices they see), and those
take their devices from CUDA_VISIBLE_DEVICES as it is at that moment. So each engine is built with
CUDA_VISIBLE_DEVICES set to its own slice, and the variable is restored afterwards. Without GPUs
(a CPU machine) nothing is set.

The transformers engine runs in the explorer process itself, whose CUDA device list is fixed when
CUDA first initialises: it does not get a GPU of its own next to other engines.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from rfthpc.engines.base import EngineSettings, EngineType, PolicyEngine
from rfthpc.errors import ConfigError

VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def visible_gpus(cuda_visible_devices: str | None, count: int) -> list[str]:
    """The GPUs a process sees, as CUDA_VISIBLE_DEVICES names them (`cuda_visible_devices`: its value,
    None if unset; `count`: the devices CUDA finds, which stop at the first invalid entry)."""
    if cuda_visible_devices is None:
        return [str(i) for i in range(count)]
    return [d.strip() for d in cuda_visible_devices.split(",")][:count]


def process_gpus() -> list[str]:
    """The GPUs this process sees (none on a machine without CUDA)."""
    import torch

    return visible_gpus(os.environ.get(VISIBLE_DEVICES), torch.cuda.device_count())


def gpu_slices(visible: Sequence[str], gpus: Mapping[str, int]) -> dict[str, str]:
    """The CUDA_VISIBLE_DEVICES value of each engine: consecutive slices of `visible`, `gpus[name]`
    GPUs each, in order; {} without visible GPUs. ConfigError if the engines need more than there are."""
    if not visible:
        return {}
    need = sum(gpus.values())
    if need > len(visible):
        each = ", ".join(f"{name}: {n}" for name, n in gpus.items())
        raise ConfigError(
            f"the explorer's engines need {need} GPUs (tensor_parallel_size of {each}) but this process sees "
            f"{len(visible)} ({VISIBLE_DEVICES}={','.join(visible)}); give each explorer task {need} GPUs "
            "(slurm.explorer.gpus_per_node) or lower the tensor_parallel_size values"
        )
    slices, start = {}, 0
    for name, n in gpus.items():
        slices[name] = ",".join(visible[start : start + n])
        start += n
    return slices


@contextmanager
def cuda_visible_devices(value: str | None) -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES=`value` inside the block (None: left as it is), restored afterwards."""
    if value is None:
        yield
        return
    before = os.environ.get(VISIBLE_DEVICES)
    os.environ[VISIBLE_DEVICES] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[VISIBLE_DEVICES]
        else:
            os.environ[VISIBLE_DEVICES] = before


def build_engines(
    plan: Mapping[str, tuple[EngineType, EngineSettings]],
    factory: Callable[[EngineType, EngineSettings], PolicyEngine],
    visible: Sequence[str],
    engines: dict[str, PolicyEngine],
) -> None:
    """Build each engine of `plan` ({name: (engine_type, settings)}, in order) on its slice of the
    `visible` GPUs, into `engines` one by one (so the caller can close those built if one fails)."""
    slices = gpu_slices(visible, {name: settings.tensor_parallel_size for name, (_, settings) in plan.items()})
    for name, (engine_type, settings) in plan.items():
        with cuda_visible_devices(slices.get(name)):
            engines[name] = factory(engine_type, settings)
