"""A veRL run whose actor trains with Megatron-LM (`ppo_megatron_trainer.yaml`, `actor.strategy: megatron`),
imported as an FSDP2 run, for `verl_import`.

Megatron-LM splits the model by tensor, pipeline, context and expert parallelism; rfthpc's trainer
shards every weight, gradient and optimizer state over its GPUs with FSDP2 instead. What the run
computes does not depend on that split: the batch sizes (`ppo_mini_batch_size`, the micro-batches),
the learning rate, its warm-up and schedule, weight decay and gradient clipping are read by the same
keys as for FSDP (`verl.VERL_MAP`). So the Megatron layout becomes one note in the header, naming what
was replaced; the Megatron settings with an FSDP2 counterpart (CPU offload, activation recomputation,
a LoRA adapter) are mapped onto it; the rest (kernel fusions, MoE dispatch, distributed checkpoints)
are Megatron's own speed and memory switches, noted.
"""

from __future__ import annotations

from rfthpc.dialects.translation import Translation

_M = "actor_rollout_ref.actor.megatron"
_OPTIM = "actor_rollout_ref.actor.optim.override_optimizer_config"
_LAYOUT = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
           "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size")
_OFFLOAD = {f"{_M}.param_offload": "trainer.param_offload", f"{_M}.optimizer_offload": "trainer.optimizer_offload",
            f"{_OPTIM}.optimizer_cpu_offload": "trainer.optimizer_offload"}
"""Megatron's CPU offload switches and FSDP2's of the same effect."""
_LORA = "actor_rollout_ref.model.lora"
_HF_LAYERS = {"linear_qkv": ["q_proj", "k_proj", "v_proj"], "linear_q": ["q_proj"], "linear_k": ["k_proj"],
              "linear_v": ["v_proj"], "linear_proj": ["o_proj"], "linear_fc1": ["gate_proj", "up_proj"],
              "linear_fc1_gate": ["gate_proj"], "linear_fc1_up": ["up_proj"], "linear_fc2": ["down_proj"]}
"""Megatron-LM's names of a decoder block's linear layers, and the Hugging Face layers they fuse."""


def uses_megatron(t: Translation) -> bool:
    """Whether veRL trains the actor with Megatron-LM."""
    return t.leaves.get("actor_rollout_ref.actor.strategy") == "megatron"


def translate_megatron(t: Translation) -> None:
    """The actor's Megatron-LM settings as FSDP2's (call only if `uses_megatron`), before the training
    settings are mapped: those keys are then handled."""
    t.get("actor_rollout_ref.actor.strategy")
    layout = {k: t.leaves.get(f"{_M}.{k}") for k in _LAYOUT}
    given = ", ".join(f"{k} {v}" for k, v in layout.items() if v not in (None, 1))
    t.notes.append(f"actor_rollout_ref.actor.strategy: megatron: rfthpc trains with FSDP2 instead of Megatron-LM: "
                   f"every weight, gradient and optimizer state is sharded over the trainer's GPUs in place of "
                   f"Megatron's model parallelism ({given or 'none beyond data parallelism'}); the batch sizes, "
                   "learning rate, warm-up, schedule, weight decay and gradient clipping are the run's own, so the "
                   "updates are the same")
    for key, target in _OFFLOAD.items():
        if t.get(key):
            t.set(target, True, key)
    recompute = t.get(f"{_M}.override_transformer_config.recompute_granularity")
    if recompute:
        t.set("trainer.enable_gradient_checkpointing", True,
              f"{_M}.override_transformer_config.recompute_granularity: {recompute} (FSDP2 recomputes whole layers)")
    t.note([f"{_M}.{k}" for k in _LAYOUT], "Megatron-LM's model parallelism, replaced by FSDP2 (see "
                                           "actor_rollout_ref.actor.strategy)")
    t.note(f"{_M}.grad_offload", "FSDP2's parameter offload (trainer.param_offload) keeps the gradients' shards on "
                                 "the CPU with the weights")
    t.note([f"{_M}.use_dist_checkpointing", f"{_M}.dist_checkpointing_path", f"{_M}.dist_checkpointing_prefix"],
           "Megatron's own checkpoint of the starting weights; rfthpc starts from the Hugging Face weights at "
           "actor_rollout_ref.model.path")
    t.note([f"{_M}.override_transformer_config", f"{_M}.override_ddp_config", f"{_M}.override_mcore_model_config",
            f"{_M}.use_mbridge", f"{_M}.vanilla_mbridge", f"{_M}.sequence_parallel",
            f"{_M}.use_distributed_optimizer", f"{_M}.use_remove_padding", f"{_M}.forward_only", f"{_M}.seed"],
           "Megatron-LM's kernels, fusions, MoE token dispatch, recomputation details and weight conversion: how "
           "Megatron computes, not what")
    _lora(t)
    t.note(f"{_M}.dtype", "the trainer computes in model.dtype (bfloat16 by default), as Megatron's bfloat16")
    t.note(_OPTIM, "Megatron's distributed-optimizer switches (CPU offload fraction, precision-aware state, "
                   "overlapped copies): memory and speed, not the update")
    t.note([k for k in t.leaves if k.startswith(f"{_M}.") and k not in t.used],
           "a Megatron-LM setting with no counterpart in FSDP2, and no effect on the updates")


def _lora(t: Translation) -> None:
    """veRL's Megatron LoRA (`model.lora.rank` > 0) as `model.lora`, its Megatron layer names as the
    Hugging Face layers they fuse (`linear_qkv`: q_proj, k_proj, v_proj)."""
    rank = t.get(f"{_LORA}.rank", 0)
    if not rank:
        t.note(_LORA, "read only with lora.rank > 0")
        return
    kind = t.get(f"{_LORA}.type", "lora")
    if kind not in ("lora", "canonical_lora"):
        t.refuse(f"{_LORA}.type", f"{kind!r}: rfthpc trains a plain LoRA adapter (lora, canonical_lora); use one")
    t.set("model.lora.lora_rank", rank, f"{_LORA}.rank")
    t.set("model.lora.lora_alpha", t.get(f"{_LORA}.alpha", 32), f"{_LORA}.alpha")
    t.set("model.lora.lora_dropout", t.get(f"{_LORA}.dropout", 0.0), f"{_LORA}.dropout")
    for key, target in (("target_modules", "target_modules"), ("exclude_modules", "exclude_modules")):
        names = t.get(f"{_LORA}.{key}") or []
        unknown = [n for n in names if n not in _HF_LAYERS]
        if unknown:
            t.refuse(f"{_LORA}.{key}", f"{', '.join(map(str, unknown))}: not a Megatron-LM linear layer rfthpc knows "
                                       f"({', '.join(_HF_LAYERS)}); name those")
        elif names:
            t.set(f"model.lora.{target}", [hf for n in names for hf in _HF_LAYERS[n]],
                  f"{_LORA}.{key} (Megatron's fused layers as Hugging Face's)")
    if t.get(f"{_LORA}.adapter_path"):
        t.set("model.lora.path", t.get(f"{_LORA}.adapter_path"), f"{_LORA}.adapter_path")
    t.note(f"{_LORA}", "Megatron LoRA's initialisation, dropout position, merging and freezing: rfthpc starts A as "
                       "PEFT does and B at zero (the adapter's output is zero at first, as Megatron's), freezes every "
                       "other weight, and sends the explorers the adapter alone")
