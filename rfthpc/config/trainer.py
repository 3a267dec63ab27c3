"""`trainer` section: checkpoints, batching, precision, and veRL's `trainer_config` pass-through."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional


@dataclass
class TrainerConfig:
    """The trainer job (torchrun + FSDP2)."""

    name: str = "trainer"
    """Name of the trainer role in logs and metrics."""
    trainer_type: Literal["verl"] = "verl"
    """Trinity's trainer backend; rfthpc's FSDP2 trainer follows veRL's semantics and metric names."""
    save_interval: int = 0
    """Save a resumable checkpoint every this many steps (0: only at the end and on preemption)."""
    save_hf_checkpoint: Literal["never", "last", "always"] = "last"
    """Also write a merged Hugging Face copy in `actor/huggingface/` of the last or every checkpoint."""
    max_checkpoints_to_keep: Optional[int] = None
    """Older resumable checkpoints beyond this count are deleted (None: keep all)."""
    grad_clip: float = 1.0
    """Gradient norm clip (veRL's `actor.grad_clip`)."""
    use_dynamic_bsz: bool = True
    """Pack micro-batches by token count (`max_token_len_per_gpu`) instead of a fixed size."""
    max_token_len_per_gpu: Optional[int] = None
    """Tokens per micro-batch per GPU with dynamic batching: padding included (samples x the longest),
    or real tokens only in padding-free micro-batches (`use_remove_padding`); defaults to 2 x
    `model.max_model_len`."""
    ppo_micro_batch_size_per_gpu: int = 4
    """Most experiences per micro-batch per GPU without dynamic batching."""
    ppo_mini_batch_size: Optional[int] = None
    """Tasks (groups) per optimizer update; defaults to the groups of one trainer step,
    `buffer.train_batch_size / algorithm.repeat_times` (one update per step)."""
    ppo_epochs: int = 1
    """Passes over each batch."""
    share_prompt_forward: bool = True
    """Run each distinct prompt of a micro-batch once and every response on its prompt's keys and
    values, instead of each response with its own copy of the prompt (a group's n responses share
    one): same log-probabilities and gradients, far fewer prompt tokens computed. Off with gradient
    checkpointing (which keeps no keys and values)."""
    use_remove_padding: bool = True
    """Padding-free micro-batches (veRL's name): the samples of a micro-batch are laid end to end in
    one row, position ids restarting at each, attention confined to each sample; nothing is computed
    on padding, and `max_token_len_per_gpu` counts real tokens. Same log-probabilities and gradients
    as padded micro-batches. Where prompts repeat (`share_prompt_forward`), each mini-batch takes
    whichever of the two layouts computes fewer tokens. Used where attention keeps to each sample at
    its own cost (the trainer's sdpa, flash-attention, flex); other models run padded."""
    enable_gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    param_offload: bool = False
    """FSDP2 CPU offload of parameters."""
    optimizer_offload: bool = False
    """FSDP2 CPU offload of optimizer state."""
    ulysses_sequence_parallel_size: int = 1
    """Ranks that split each sequence (Ulysses sequence parallelism, veRL's and Trinity-RFT's key): each
    holds 1/N of every padding-free micro-batch's tokens, and attention exchanges heads for tokens
    (all-to-all). For sequences too long for one GPU's activations; N must divide the trainer's GPUs and
    the model's attention and key/value heads, and needs `use_remove_padding`. 1: none."""
    total_steps: Optional[int] = None
    """Trainer steps (alias of `buffer.total_steps`)."""
    critic_warmup: int = 0
    """Steps that train only the critic (PPO); the actor's learning-rate schedule starts after them."""
    critic_lr: float = 1e-5
    """Critic learning rate (veRL's `critic.optim.lr`)."""
    critic_lr_warmup_steps_ratio: float = 0.0
    """Critic warm-up ratio."""
    trainer_config: dict[str, Any] = field(default_factory=dict)
    """veRL-style settings (`actor_rollout_ref`, `critic`, `trainer`); known keys are mapped onto the fields above."""
    trainer_config_path: Optional[str] = None
    """A veRL YAML whose settings are read as `trainer_config`."""


def sequence_parallel_problems(t: TrainerConfig, world: int | None, models: dict[str, str | None]) -> list[str]:
    """What is wrong with `t.ulysses_sequence_parallel_size`, each naming the key and the fix. `world`:
    the trainer's ranks where the config fixes them (nodes x GPUs per node), else None (`rfthpc run
    --trainer-procs` decides); `models`: key -> directory of each model whose heads are split (its
    config.json is read; a missing one is reported under its own key)."""
    key = "trainer.ulysses_sequence_parallel_size"
    n = t.ulysses_sequence_parallel_size
    if n < 1:
        return [f"{key}: {n} must be >= 1 (1: no sequence parallelism)"]
    if n == 1:
        return []
    out = []
    if world is not None and world % n:
        out.append(f"{key}: {n} does not divide the trainer's {world} GPUs (slurm.trainer.nodes x gpus_per_node); "
                   "each sequence-parallel group is N of them: use a divisor")
    if not t.use_remove_padding:
        out.append(f"{key}: {n} splits padding-free micro-batches; set trainer.use_remove_padding: true")
    for model_key, path in models.items():
        try:
            config = json.loads((Path(path).expanduser() / "config.json").read_text()) if path else None
        except (OSError, ValueError):
            config = None
        if not isinstance(config, dict) or not isinstance(config.get("num_attention_heads"), int):
            continue
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or heads
        if heads % n or kv_heads % n:
            out.append(f"{key}: {n} does not divide the {heads} attention heads and {kv_heads} key/value heads of "
                       f"{model_key} ({path}); each rank attends with 1/N of both: use a divisor of both")
    return out
