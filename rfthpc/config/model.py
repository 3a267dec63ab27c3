"""`model` and `cluster` sections: the policy model, token budgets, sampling defaults, GPU count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from rfthpc.config.lora import LoRAConfig


@dataclass
class ModelConfig:
    """The policy (and critic) model and its token budgets."""

    model_path: str = ""
    """Local directory of the Hugging Face model to fine-tune (compute nodes have no internet)."""
    critic_model_path: str = ""
    """Critic model directory for PPO; defaults to `model_path`."""
    teacher_model_path: Optional[str] = None
    """The teacher of on-policy distillation (`algorithm_type: on_policy_distill` or `jsd`): a model with the policy's
    tokenizer, of any size, loaded frozen in the trainer, which scores each sampled token with it."""
    max_model_len: Optional[int] = None
    """Prompt + response token limit; defaults to `max_prompt_tokens + max_response_tokens`."""
    max_prompt_tokens: Optional[int] = None
    """Longest prompt; defaults to `max_model_len - max_response_tokens`."""
    max_response_tokens: Optional[int] = None
    """Longest response (veRL's `data.max_response_length`)."""
    min_response_tokens: int = 1
    """Shortest response the engine may stop at."""
    enable_prompt_truncation: bool = True
    """Over-long prompts: truncate them (true) or skip the task (false); both are counted."""
    temperature: float = 1.0
    """Default sampling temperature (a taskset's `rollout_args` overrides it)."""
    top_p: float = 1.0
    """Default nucleus sampling threshold."""
    top_k: int = -1
    """Default top-k (-1: off)."""
    logprobs: int = 0
    """Default `rollout_args.logprobs`: top alternatives per response token handed to workflows (the
    sampled token's logprob is always kept)."""
    custom_chat_template: Optional[str] = None
    """A Jinja chat template that replaces the tokenizer's, for the trainer and the explorers alike."""
    chat_template_path: Optional[str] = None
    """A file holding the chat template (instead of `custom_chat_template` or
    `explorer.rollout_model.chat_template`; two of them giving different templates is an error)."""
    enable_thinking: Optional[bool] = None
    """Passed as `enable_thinking` to the chat template of the explorer's prompts (Qwen3's thinking
    switch) when set, and of an sft stage's conversations; default of
    `explorer.rollout_model.enable_thinking`."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Training dtype; auto means bfloat16 on GPU and float32 on CPU."""
    lora: LoRAConfig | None = None
    """Train a LoRA adapter on the frozen model instead of every weight; explorers receive the adapter
    only (null: full fine-tuning)."""


@dataclass
class ClusterConfig:
    """The GPUs of the run, as Trinity-RFT counts them (explorer engines + trainer)."""

    node_num: int = 1
    """Nodes of the run (veRL's `trainer.nnodes`)."""
    gpu_per_node: int = 8
    """GPUs per node (veRL's `trainer.n_gpus_per_node`); 0 on CPU-only machines."""
    gpu_memory_gb: Optional[float] = None
    """Memory of one GPU in GiB (e.g. 80): with `slurm.layout: colocated`, what the trainer and the rollout
    engine must share; validation checks that both fit (None: not checked)."""
