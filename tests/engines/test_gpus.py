"""Each engine of an explorer gets its own slice of the task's GPUs: the rollout engine the first
`tensor_parallel_size`, each auxiliary model the next ones, through CUDA_VISIBLE_DEVICES while it is
built (vLLM's engine processes take their devices from it). Without GPUs nothing changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rfthpc.engines import EngineSettings, make_engine
from rfthpc.engines.gpus import build_engines, gpu_slices, visible_gpus
from rfthpc.errors import ConfigError


def test_visible_gpus_follow_cuda_visible_devices() -> None:
    assert visible_gpus("4,6,7", 3) == ["4", "6", "7"]
    assert visible_gpus("GPU-a1, GPU-b2", 2) == ["GPU-a1", "GPU-b2"]
    assert visible_gpus(None, 2) == ["0", "1"]
    # CUDA stops at the first invalid entry; a CPU machine sees none.
    assert visible_gpus("0,1,99", 2) == ["0", "1"]
    assert visible_gpus(None, 0) == [] and visible_gpus("0", 0) == []


def test_engines_get_consecutive_slices_in_order() -> None:
    visible = ["4", "5", "6", "7"]
    assert gpu_slices(visible, {"policy": 2, "judge": 1}) == {"policy": "4,5", "judge": "6"}
    assert gpu_slices(visible, {"policy": 1, "judge": 2, "critic": 1}) == {"policy": "4", "judge": "5,6",
                                                                           "critic": "7"}
    assert gpu_slices([], {"policy": 2, "judge": 1}) == {}


def test_too_few_gpus_is_a_config_error_naming_the_models() -> None:
    with pytest.raises(ConfigError, match=r"need 3 GPUs \(tensor_parallel_size of policy: 2, judge: 1\) but this "
                                          r"process sees 2 \(CUDA_VISIBLE_DEVICES=0,1\)"):
        gpu_slices(["0", "1"], {"policy": 2, "judge": 1})


@pytest.mark.parametrize("before", [None, "4,5,6,7"])
def test_each_engine_is_built_with_its_slice(tiny_model: Path, monkeypatch, before: str | None) -> None:
    """The environment each engine's constructor runs with (real engines; this machine has no GPU)."""
    if before is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", before)
    seen: list[tuple[int, str | None]] = []

    def factory(engine_type, settings):
        seen.append((settings.seed, os.environ.get("CUDA_VISIBLE_DEVICES")))
        return make_engine(engine_type, settings)

    # Told apart by their seeds.
    plan = {"policy": ("transformers", EngineSettings(str(tiny_model), seed=1, tensor_parallel_size=2)),
            "judge": ("transformers", EngineSettings(str(tiny_model), seed=2))}
    for visible, expected in ((["4", "5", "6", "7"], [(1, "4,5"), (2, "6")]), ([], [(1, before), (2, before)])):
        seen.clear()
        engines: dict = {}
        build_engines(plan, factory, visible, engines)
        assert seen == expected and sorted(engines) == ["judge", "policy"]
        assert os.environ.get("CUDA_VISIBLE_DEVICES") == before
        for engine in engines.values():
            engine.close()
