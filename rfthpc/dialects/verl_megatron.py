"""A veRL run whose actor trains with Megatron-LM (`ppo_megatron_trainer.yaml`, `actor.strategy: megatron`),
imported as an FSDP2 run, for `verl_import`.

Megatron-LM splits the model by tensor, pipeline, context and expert parallelism; rfthpc's trainer
shards every weight, gradient and optimizer state over its GPUs with FSDP2 instead. What the run
computes does not depend on that split: the batch sizes (`ppo_mini_batch_size`, the micro-batches),
the learning rate, its warm-up and schedule, weight decay and gradient clipping are read by the same
keys as for FSDP (`verl.VERL_MAP`). So the Megatron layout becomes one note in the header, naming what
was replaced; the few Megatron settings with an FSDP2 counterpart (CPU offload, activation
recomputation) are mapped onto it; the rest (kernel fusions, MoE dispatch, distributed checkpoints)
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
    t.note(f"{_M}.dtype", "the trainer computes in model.dtype (bfloat16 by default), as Megatron's bfloat16")
    t.note(_OPTIM, "Megatron's distributed-optimizer switches (CPU offload fraction, precision-aware state, "
                   "overlapped copies): memory and speed, not the update")
    t.note([k for k in t.leaves if k.startswith(f"{_M}.") and k not in t.used],
           "a Megatron-LM setting with no counterpart in FSDP2, and no effect on the updates")
