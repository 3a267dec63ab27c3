"""vLLM's engine arguments as rfthpc reads them: the `engine_kwargs` of an inference model
(`explorer.rollout_model`, `explorer.auxiliary_models[i]`) and of a veRL run's rollout, passed
through as given on top of those rfthpc sets itself (`rfthpc.engines`).

The names are checked when the config is validated, before any job starts, against the fields of
vLLM's `EngineArgs` in the vLLM installed here. Those are read from the source of
`vllm/engine/arg_utils.py` rather than by importing it: importing vLLM costs seconds (torch, CUDA
probing), validating a config must not. An argument rfthpc sets from a setting of its own must be
given there (one place for each value); one rfthpc sets for its own workings cannot be changed.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rfthpc.errors import INVALID

if TYPE_CHECKING:
    from rfthpc.config.explorer import InferenceModelConfig
    from rfthpc.config.schema import Config
    from rfthpc.errors import Problems

FROM_SETTINGS: dict[str, str] = {
    "model": "model_path",
    "dtype": "dtype",
    "seed": "seed",
    "tensor_parallel_size": "tensor_parallel_size",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "enforce_eager": "enforce_eager",
    "enable_sleep_mode": "enable_sleep_mode",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "max_model_len": "max_model_len",
    "served_model_name": "name",
    "enable_lora": "model.lora",
    "max_loras": "model.lora",
    "max_lora_rank": "model.lora.lora_rank",
    "lora_dtype": "model.lora.lora_dtype",
}
"""vLLM arguments rfthpc sets from its own settings: the setting to use instead (the model's own,
unless it starts with `model.`)."""

RFTHPC_OWN: dict[str, str] = {
    "logprobs_mode": "rfthpc records the log-probabilities of the distribution each token was sampled from "
                     "(processed_logprobs), which its losses expect",
    "worker_extension_cls": "rfthpc's workers load each published policy in place through it",
    "distributed_executor_backend": "rfthpc chooses how an engine's processes run (one process on CPUs)",
    "load_format": "rfthpc's engines read the model as its weight updates expect",
}
"""vLLM arguments rfthpc sets for its own workings, and why they cannot be changed."""


@functools.cache
def vllm_arg_names() -> frozenset[str] | None:
    """The fields of the installed vLLM's `EngineArgs` (read, not imported); None without vLLM."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(next(iter(spec.submodule_search_locations))) / "engine" / "arg_utils.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "EngineArgs":
            return frozenset(n.target.id for n in node.body
                             if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
    return None


def name_problem(name: str, key: str, names: frozenset[str] | None = None) -> str | None:
    """Why the vLLM argument `name` cannot be in the `engine_kwargs` of the model at `key`, or None if it
    can (`names`: vLLM's arguments, by default the installed vLLM's; none installed: only rfthpc's own
    arguments are checked)."""
    names = vllm_arg_names() if names is None else names
    if name in FROM_SETTINGS:
        setting = FROM_SETTINGS[name] if FROM_SETTINGS[name].startswith("model.") else f"{key}.{FROM_SETTINGS[name]}"
        return f"rfthpc sets it from {setting}; set that instead"
    if name in RFTHPC_OWN:
        return f"cannot be changed: {RFTHPC_OWN[name]}; remove it"
    if names is not None and name not in names:
        close = difflib.get_close_matches(name, sorted(names), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return (f"not an argument of the installed vLLM's engine (vllm.engine.arg_utils.EngineArgs){hint}; fix its "
                "name, or remove it")
    return None


def kwargs_problems(key: str, kwargs: Mapping[str, Any], engine_type: str,
                    names: frozenset[str] | None = None) -> list[str]:
    """What is wrong with the `engine_kwargs` of the model at `key` (`names` as in `name_problem`)."""
    if kwargs and engine_type == "transformers":
        return [f"{key}.engine_kwargs: vLLM's engine arguments, but engine_type is transformers, which reads none; "
                "remove them, or use engine_type vllm"]
    found = ((name, name_problem(name, key, names)) for name in kwargs)
    return [f"{key}.engine_kwargs.{name}: {why}" for name, why in found if why]


def engine_kwargs_problems(cfg: Config, problems: Problems) -> None:
    """Every inference model's `engine_kwargs` names vLLM arguments rfthpc passes. A check of
    `rfthpc.config.validate`."""
    models: list[tuple[str, InferenceModelConfig]] = [("explorer.rollout_model", cfg.explorer.rollout_model)]
    models += [(f"explorer.auxiliary_models[{i}]", aux) for i, aux in enumerate(cfg.explorer.auxiliary_models)]
    for key, model in models:
        for message in kwargs_problems(key, model.engine_kwargs, model.engine_type):
            problems.add(message, INVALID)
