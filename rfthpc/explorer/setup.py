"""From a stage's config to what the explorer runs: engine settings, tasksets, prompt builder.

The explorer's settings (`rfthpc.config.settings.ExplorerSettings`: engines, chat templates, token
limits, prompt truncation) become engine settings and prompt builders here, and a stage's finalized
tasksets (data, format, rollout_args, repeat_times, workflow, reward) become Tasks. Keys rfthpc
accepts but cannot honour are rejected when the config is validated
(`rfthpc.dialects.trinity.unsupported_values`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rfthpc.config.buffer import TasksetConfig
from rfthpc.config.settings import ExplorerSettings, InferenceModelSettings
from rfthpc.engines.base import EngineSettings
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import ConfigError
from rfthpc.tasks.tasksets import PromptBuilder, Task, load_taskset
from rfthpc.workflows.base import AuxiliaryModel, RolloutEngine
from rfthpc.workflows.registry import reads_text_columns


def engine_settings(
    settings: ExplorerSettings, model: InferenceModelSettings, rank: int, model_path: str | None = None
) -> EngineSettings:
    """Settings of one engine of array task `rank` (seed + rank); `model_path` overrides the model's
    (the policy restarts from the newest published weights)."""
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
        min_response_tokens=settings.min_response_tokens,
        lora=model.lora,
        engine_kwargs=model.engine_kwargs,
    )


def _tokenizer(model_path: str, template: str | None) -> Any:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(str(Path(model_path).expanduser()))
    if template:
        tokenizer.chat_template = template
    return tokenizer


def prompt_builder(settings: ExplorerSettings, model: InferenceModelSettings) -> PromptBuilder:
    """`model`'s tokenizer (with its chat template), thinking switch and prompt-length policy."""
    return PromptBuilder(_tokenizer(model.model_path, model.chat_template), model.max_prompt_tokens,
                         settings.enable_prompt_truncation, model.enable_thinking)


def auxiliary_model(settings: ExplorerSettings, aux: InferenceModelSettings, engine: RolloutEngine) -> AuxiliaryModel:
    """What workflows see of auxiliary model `aux` served by `engine`: its own tokenizer, chat template,
    thinking switch and token limits (`max_prompt_tokens`, `max_response_tokens`)."""
    return AuxiliaryModel(aux.name, engine, prompt_builder(settings, aux), aux.max_response_tokens)


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
    # Rows of a workflow that reads neither prompt nor reference answer (an environment's seeds) need neither column.
    text = reads_text_columns(ts.default_workflow_type, f.workflow_key or None)
    tasks = load_taskset(
        ts.path,
        name=ts.name,
        subset_name=ts.subset_name,
        split=ts.split,
        prompt_type=f.prompt_type if text else "plaintext",
        prompt_key=f.prompt_key if text else None,
        response_key=(f.response_key or None) if text else None,
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
