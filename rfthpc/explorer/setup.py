"""From a stage's config to what the explorer runs: engine settings, tasksets, prompt builder.

Config keys read here: `model.*` (path, token budgets, prompt truncation, chat template,
enable_thinking, min_response_tokens), `explorer.rollout_model.*` / `explorer.auxiliary_models[*]`
(engine; chat template, enable_thinking and token limits of prompts), and
`buffer.explorer_input.tasksets` / `eval_tasksets` (data, format, rollout_args, repeat_times,
workflow, reward). Keys rfthpc accepts but cannot honour are rejected when the config is
validated (`rfthpc.config.compat.unsupported_values`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rfthpc.config import Config
from rfthpc.config.buffer import TasksetConfig
from rfthpc.config.explorer import InferenceModelConfig
from rfthpc.data.tasksets import PromptBuilder, Task, load_taskset
from rfthpc.engines.base import EngineSettings
from rfthpc.errors import ConfigError
from rfthpc.workflows.base import AuxiliaryModel, RolloutEngine, SamplingArgs

POLICY_ENGINE = "policy"
"""The batcher's name of the rollout engine (auxiliary engines go by their `name`)."""


def engine_settings(
    cfg: Config, model: InferenceModelConfig, rank: int, model_path: str | None = None
) -> EngineSettings:
    """Settings of one engine of array task `rank` (seed + rank); `model_path` overrides the config's."""
    return EngineSettings(
        model_path=str(model_path or model.model_path),
        dtype=model.dtype,
        max_model_len=model.max_model_len,
        seed=model.seed + rank,
        tensor_parallel_size=model.tensor_parallel_size,
        gpu_memory_utilization=model.gpu_memory_utilization,
        enforce_eager=model.enforce_eager,
        enable_prefix_caching=model.enable_prefix_caching,
        enable_chunked_prefill=model.enable_chunked_prefill,
        cpu_kvcache_space_gb=model.cpu_kvcache_space_gb,
        min_response_tokens=cfg.model.min_response_tokens,
    )


def auxiliary_settings(cfg: Config, rank: int) -> dict[str, tuple[str, EngineSettings]]:
    """`{name: (engine_type, settings)}` of `explorer.auxiliary_models` (e.g. an LLM judge)."""
    out: dict[str, tuple[str, EngineSettings]] = {}
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        if not aux.name or aux.name == POLICY_ENGINE or aux.name in out:
            raise ConfigError(
                f"explorer.auxiliary_models[{i}].name={aux.name!r}: give each auxiliary model a unique "
                f"name other than {POLICY_ENGINE!r}; workflows address it by that name"
            )
        if not aux.model_path:
            raise ConfigError(f"explorer.auxiliary_models[{i}].model_path: missing; give a local model directory")
        out[aux.name] = (aux.engine_type, engine_settings(cfg, aux, rank, aux.model_path))
    return out


def _tokenizer(model_path: str, template: str | None) -> Any:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(str(Path(model_path).expanduser()))
    if template:
        tokenizer.chat_template = template
    return tokenizer


def prompt_builder(cfg: Config) -> PromptBuilder:
    """The policy tokenizer (with any chat template override), its thinking switch and the prompt-length policy."""
    return PromptBuilder(
        _tokenizer(cfg.model.model_path, cfg.model.custom_chat_template), cfg.model.max_prompt_tokens,
        cfg.model.enable_prompt_truncation, cfg.explorer.rollout_model.enable_thinking,
    )


def auxiliary_model(cfg: Config, aux: InferenceModelConfig, engine: RolloutEngine) -> AuxiliaryModel:
    """What workflows see of auxiliary model `aux` served by `engine`: its own tokenizer, chat template,
    thinking switch and token limits (`max_prompt_tokens`, `max_response_tokens`)."""
    assert aux.model_path is not None, "auxiliary_settings checks the path first"
    prompts = PromptBuilder(_tokenizer(aux.model_path, aux.chat_template), aux.max_prompt_tokens,
                            cfg.model.enable_prompt_truncation, aux.enable_thinking)
    return AuxiliaryModel(aux.name, engine, prompts, aux.max_response_tokens)


@dataclass
class Taskset:
    """One loaded taskset."""

    config: TasksetConfig
    tasks: list[Task]

    @property
    def name(self) -> str:
        """The taskset's name (keys its metrics)."""
        return self.config.name


def load(ts: TasksetConfig, is_eval: bool) -> Taskset:
    """Read a taskset's data into Tasks (UserError naming the path or key if it cannot)."""
    if not ts.path:
        group = "eval_tasksets" if is_eval else "tasksets"
        raise ConfigError(f"buffer.explorer_input.{group}: taskset {ts.name!r} has no path; give a local dataset path")
    f = ts.format
    tasks = load_taskset(
        ts.path,
        name=ts.name,
        subset_name=ts.subset_name,
        split=ts.split,
        prompt_type=f.prompt_type,
        prompt_key=f.prompt_key,
        response_key=f.response_key,
        messages_key=f.messages_key,
        system_prompt=f.system_prompt,
        system_prompt_key=f.system_prompt_key or None,
        reply_prefix=f.reply_prefix,
        chat_template=f.chat_template,
        workflow=ts.default_workflow_type,
        reward_fn=ts.default_reward_fn_type,
        workflow_key=f.workflow_key or None,
        reward_fn_key=f.reward_fn_key or None,
        workflow_args=ts.workflow_args,
        reward_fn_args=ts.reward_fn_args,
        rollout_args=SamplingArgs.from_config(ts.rollout_args),
        repeat_times=ts.repeat_times,
        is_eval=is_eval,
        enable_progress_bar=ts.enable_progress_bar,
    )
    return Taskset(ts, tasks)
