"""What every rollout engine provides, and the settings it is built from.

An engine turns prompt token ids into sampled responses with the behaviour policy's per-token
logprobs (`rfthpc.engines.sampling.Completion`) and can swap in new weights from a published step
directory without a restart. Workflows see only `generate(prompts, n, params)` (the
`RolloutEngine` protocol of `rfthpc.workflows.base`); the explorer additionally calls
`generate_batch` (requests of several tasks in one engine call), `load_weights` and `close`.

Errors: an engine raises a `ValueError` (`RequestRejected`, e.g. `PromptTooLong`) for a request it
refuses, which is that request's fault; any other exception from a generate call means the engine
itself failed (vLLM's EngineDeadError after a CUDA or NCCL error, CUDA out of memory) and the
explorer stops (`rfthpc.engines.batching.EngineFailed`).

Logprob convention (docs/explorer.md): an engine returns the log-probability of each sampled
token under the distribution it sampled from, i.e. after temperature (and after the top-k/top-p
cut): log softmax(logits / T)[token]. With T < `GREEDY_TEMPERATURE` (greedy) it is log softmax(logits)[token].
The top alternatives a request asks for (`SamplingArgs.logprobs`) come from the same distribution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from rfthpc.config.lora import LoRASettings
from rfthpc.engines.sampling import GREEDY_TEMPERATURE, Completion, SamplingArgs
from rfthpc.errors import ConfigError, UserError

EngineType = Literal["vllm", "vllm_async", "transformers"]
ENGINE_TYPES: tuple[str, ...] = get_args(EngineType)

def is_greedy(temperature: float) -> bool:
    """True if sampling at `temperature` is greedy decoding (vLLM's rule, see `GREEDY_TEMPERATURE`)."""
    return temperature < GREEDY_TEMPERATURE


@dataclass(frozen=True)
class GenerateRequest:
    """`n` samples for one prompt with one taskset's sampling parameters."""

    prompt_token_ids: Sequence[int]
    n: int
    params: SamplingArgs


@dataclass(frozen=True)
class EngineSettings:
    """How to build an engine (from `explorer.rollout_model` and `model`, see rfthpc/explorer/setup.py)."""

    model_path: str
    """HF model directory the engine starts from (the initial model or a published step dir)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """auto: float32 on CPU (faster there than bfloat16 without AVX512-BF16), bfloat16 on GPU."""
    max_model_len: int | None = None
    """Prompt + response token limit (None: the model's)."""
    seed: int = 42
    """Sampling seed of this engine (the explorer passes `seed + rank`)."""
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    enable_prefix_caching: bool = False
    enable_chunked_prefill: bool = False
    cpu_kvcache_space_gb: int = 4
    """vLLM's CPU backend: KV cache size (VLLM_CPU_KVCACHE_SPACE)."""
    min_response_tokens: int = 1
    """No end-of-sequence token before this many response tokens."""
    lora: LoRASettings | None = None
    """The policy of a LoRA run: `model_path` is the base model and each version an adapter
    (`load_weights` of a PEFT directory); vLLM reserves room for an adapter of this rank."""
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Further vLLM engine arguments, passed as given (`explorer.rollout_model.engine_kwargs`)."""
    enable_sleep_mode: bool = False
    """The engine sleeps while a colocated trainer uses its GPUs (rfthpc.engines.time_sharing): vLLM's sleep
    mode on CUDA (the CPU build has none: nothing to release)."""

    def __post_init__(self) -> None:
        if not Path(self.model_path).expanduser().is_dir():
            raise UserError(
                f"rollout model {self.model_path} is not a directory; set model.model_path (or "
                "explorer.rollout_model.model_path) to a local Hugging Face model directory"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"max_model_len={self.max_model_len}: use at least 2 tokens")
        if self.tensor_parallel_size < 1:
            raise ConfigError(f"tensor_parallel_size={self.tensor_parallel_size}: use at least 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"gpu_memory_utilization={self.gpu_memory_utilization}: use a value in (0, 1]")
        if self.min_response_tokens < 0:
            raise ConfigError(f"min_response_tokens={self.min_response_tokens}: use a value >= 0")


class PolicyEngine(Protocol):
    """A rollout engine the explorer drives: batched generation and in-place weight updates."""

    def generate(
        self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        """For each prompt, `n` independent samples (the workflows' `RolloutEngine` protocol)."""
        ...

    def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Completion]]:
        """Serve several requests (of different tasks and sampling parameters) in one engine call."""
        ...

    def load_weights(self, path: Path) -> None:
        """Replace the weights with those of the HF directory `path` (same architecture), in place; a
        PEFT adapter directory (`rfthpc.weights.published.is_adapter_dir`) replaces the adapter applied to the
        base model instead."""
        ...

    def close(self, process_ending: bool = False) -> None:
        """Free the engine's resources (`process_ending`: only those that would outlive this process,
        which ends next: its child processes, servers)."""
        ...


class RequestRejected(ValueError):
    """The engine refuses a request (its prompt or sampling parameters): the task that made it fails
    (and is counted), the engine and the explorer go on."""


class PromptTooLong(RequestRejected):
    """A prompt leaves no room for a response."""


def check_prompt_fits(request: GenerateRequest, max_model_len: int | None) -> None:
    """Raise PromptTooLong if the prompt leaves no room for a response within `max_model_len`."""
    if max_model_len is not None and len(request.prompt_token_ids) >= max_model_len:
        raise PromptTooLong(
            f"a prompt of {len(request.prompt_token_ids)} tokens leaves no room for a response within "
            f"max_model_len={max_model_len}; set model.max_prompt_tokens below max_model_len"
        )


def make_engine(engine_type: EngineType, settings: EngineSettings) -> PolicyEngine:
    """Build the engine named by `explorer.rollout_model.engine_type` (vllm_async is vllm)."""
    if engine_type in ("vllm", "vllm_async"):
        from rfthpc.engines.vllm_engine import VLLMEngine

        return VLLMEngine(settings)
    if engine_type == "transformers":
        from rfthpc.engines.hf_engine import TransformersEngine

        return TransformersEngine(settings)
    raise ConfigError(f"engine_type {engine_type!r} is unknown; use one of {', '.join(ENGINE_TYPES)}")
