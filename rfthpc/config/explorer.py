"""`explorer` section: rollout engines, runners per engine, evaluation cadence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional


@dataclass
class InferenceModelConfig:
    """One inference engine kind: the rollout model or an auxiliary model (e.g. an LLM judge)."""

    name: str = ""
    """Auxiliary models: the name by which workflows and reward functions address it
    (`ctx.auxiliary[name]`; unnamed: `auxiliary_<i>`, its position); not used for the rollout model."""
    model_path: Optional[str] = None
    """Model directory of an auxiliary model; the rollout model always starts from `model.model_path`
    (leave it unset there)."""
    engine_type: Literal["vllm", "vllm_async", "transformers"] = "vllm"
    """vllm (CUDA or CPU build), or the transformers fallback; vllm_async is an alias of vllm."""
    engine_num: int = 1
    """Engines. Rollout model: each is one explorer array task. Auxiliary model: with `placement: shared`,
    the engines that serve the whole run (Trinity-RFT's count); with `per_explorer`, 1 or the explorers'
    count (each explorer runs one)."""
    placement: Literal["shared", "per_explorer"] = "shared"
    """Auxiliary models: where their engines run. shared: `engine_num` engines of `tensor_parallel_size`
    GPUs each serve every explorer of the run, as vLLM OpenAI-compatible servers in a Slurm job array of
    their own (`slurm.server`; under `rfthpc run`, local processes), so their GPUs count once for the run,
    as Trinity-RFT counts them: a Trinity config whose judge has engine_num 1 and tensor_parallel_size 2
    gets one judge on 2 GPUs, not one per explorer. per_explorer: every explorer runs one engine of it in
    its own process, next to its rollout engine (its GPUs count in every explorer task; no server to wait
    for; the only choice for engine_type transformers). Not read for the rollout model (one engine per
    explorer)."""
    server_timeout: float = 1800.0
    """Auxiliary models with `placement: shared`: seconds an explorer keeps retrying a request while no
    engine of the model's server answers (starting, requeued after a preemption) before it stops with an
    error naming the server."""
    tensor_parallel_size: int = 1
    """GPUs per engine (vLLM tensor parallelism)."""
    gpu_memory_utilization: float = 0.9
    """Fraction of GPU memory vLLM may use."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Engine dtype; auto: bfloat16 on GPU, float32 on CPU."""
    enforce_eager: bool = False
    """Disable CUDA graphs (always eager on CPU)."""
    enable_sleep_mode: Optional[bool] = None
    """Rollout model of a colocated run (`slurm.layout: colocated`): time-share each GPU with the trainer. The
    explorer's engines sleep (vLLM's sleep mode: weights to CPU memory, KV cache freed) while the trainer
    steps, and the trainer moves its weights and optimizer state to CPU memory while the explorer generates;
    the two take turns on each GPU. None: chosen at validation from the memory estimate (on when the
    trainer and the engine fit one at a time but not together, `cluster.gpu_memory_gb`); false for other
    layouts. TRL's `vllm_enable_sleep_mode`."""
    enable_prefix_caching: bool = False
    """vLLM prefix caching (cleared after each weight update)."""
    enable_chunked_prefill: bool = False
    """vLLM chunked prefill."""
    use_v1: bool = True
    """vLLM V1 engine; current vLLM has no other, so false is rejected."""
    seed: int = 42
    """Engine seed; array task r uses seed + r."""
    enable_thinking: Optional[bool] = None
    """Passed to the chat template as `enable_thinking` (Qwen3's thinking switch); None: the template's
    default. The rollout model's defaults to `model.enable_thinking`."""
    chat_template: Optional[str] = None
    """A Jinja chat template replacing the tokenizer's for this model's prompts (rollout model: the
    policy's one template, also trained on; see `model.custom_chat_template`)."""
    max_prompt_tokens: Optional[int] = None
    """Auxiliary models: longest prompt `chat` renders (longer ones are truncated or refused per
    `model.enable_prompt_truncation`). Rollout model: set `model.max_prompt_tokens` instead."""
    max_response_tokens: Optional[int] = None
    """Auxiliary models: most tokens per response (caps every request). Rollout model: set
    `model.max_response_tokens` instead."""
    max_model_len: Optional[int] = None
    """Context length; defaults to `model.max_model_len` for the rollout model."""
    cpu_kvcache_space_gb: int = 4
    """vLLM CPU backend only: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE)."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Further arguments of vLLM's engine (`vllm.engine.arg_utils.EngineArgs`, e.g. `max_num_seqs: 256`),
    passed as given (a shared server gets them as flags); checked at validation against the installed
    vLLM's names. Those rfthpc sets from the settings above must be set there (rfthpc.dialects.vllm_args)."""


@dataclass
class ExplorerConfig:
    """The explorers: one Slurm job array (or local processes) per explorer name."""

    name: str = "explorer"
    """Name of this explorer array; explorers added mid-run need a new name (e.g. explorer_new)."""
    runner_per_model: int = 8
    """Tasks each engine works on concurrently."""
    max_timeout: float = 1800.0
    """Seconds a single workflow run may take before it is abandoned (and the task retried)."""
    max_retry_times: int = 2
    """Retries of a timed-out or failed workflow run before the task is given up (and counted)."""
    max_retry_interval: float = 1.0
    """Seconds between those retries."""
    max_repeat_times_per_runner: int | None = None
    """Most responses one request to the rollout engine asks for (Trinity-RFT's key): a task's
    `repeat_times` responses (a group) are asked for in requests of at most this many, all in the
    same engine call, and the group still gets every response; a seeded taskset gets the samples one
    request would give with vLLM. None: one request per prompt."""
    env_vars: dict[str, str] = field(default_factory=dict)
    """Environment variables set in each explorer process before its engines start (the workflows,
    reward functions and vLLM's engine processes see them), under `rfthpc run` and Slurm alike; they
    override the inherited environment. Numbers are written as text (quote a value to keep its exact
    text); credentials are refused, as the config is stored in the run directory: export those instead."""
    rollout_model: InferenceModelConfig = field(default_factory=InferenceModelConfig)
    """The policy's rollout engine."""
    auxiliary_models: list[InferenceModelConfig] = field(default_factory=list)
    """Extra engines a workflow may call (reward models, LLM judges)."""
    teacher_model: Optional[str] = None
    """On-policy distillation (`algorithm_type: on_policy_distill` or `jsd`) with the teacher served beside the
    explorers, as Trinity-RFT serves it: the `name` of the auxiliary model that scores each training sample as
    it is made (the log-probability of each response token, at temperature 1, stored with the sample), on the
    explorer's GPUs or, with `placement: shared`, on GPUs of its own; the trainer then loads no teacher. The
    other way is `model.teacher_model_path`: the teacher loaded frozen in the trainer (a small one)."""
    eval_interval: int = 100
    """Evaluate the eval tasksets every this many policy versions."""
    eval_on_startup: bool = True
    """Evaluate the initial policy before training (veRL's `trainer.val_before_train`)."""
    claim_batches: int = 0
    """Batches of tasks an explorer claims in one transaction on the shared claims file (it works
    through them one batch at a time). More batches mean fewer lock round trips for many explorers
    on a networked filesystem (docs/scaling.md); 0: 1 for arrays of up to 8 explorers, then one more
    per 8 explorers, at most 8."""
    claim_shards: int = 0
    """Files a claim set's task claims are split over, each with its own lock (an explorer claims from
    the one its rank picks, then from the others): for arrays of many explorers on a networked
    filesystem (docs/scaling.md). Fixed when the claim set is created; explorers that join later use
    that. 0: one shard per 16 explorers of the array that creates it."""
    bench_on_latest_checkpoint: bool = False
    """Trinity-RFT's `mode: bench` switch; rfthpc has no bench mode, so true is rejected (eval tasksets
    are evaluated during the run, see `eval_interval`)."""
    weights_poll_interval: float = 1.0
    """Longest time in seconds between checks of `weights/latest` for a newer policy while waiting for
    one; a publication (a new entry there) is noticed within tens of milliseconds while the explorer
    needs it, on its node or another (rfthpc.sharedfs.handoff)."""
