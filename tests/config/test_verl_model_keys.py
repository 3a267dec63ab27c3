"""veRL settings of its example scripts that rfthpc follows its own way: remote code and the FSDP reduce
dtype are noted, not refused."""

from __future__ import annotations

import pytest

from rfthpc.dialects.verl_import import import_verl
from rfthpc.errors import ConfigError
from tests.config.test_verl_import import CONFIG, ENV, SCRIPT

MP = "actor_rollout_ref.actor.fsdp_config.mixed_precision"


def test_trust_remote_code_is_noted_for_the_model_and_the_tokenizer() -> None:
    imported = import_verl(CONFIG, ["actor_rollout_ref.model.trust_remote_code=true", "data.trust_remote_code=true"],
                           script=SCRIPT, environ=ENV)
    notes = " ".join(imported.notes)
    assert "actor_rollout_ref.model.trust_remote_code: rfthpc loads models and tokenizers with transformers' own" \
        in notes
    assert "data.trust_remote_code: rfthpc loads models and tokenizers" in notes


def test_a_bfloat16_gradient_reduction_is_noted_and_float16_refused() -> None:
    imported = import_verl(CONFIG, [f"+{MP}.reduce_dtype=bf16"], script=SCRIPT, environ=ENV)
    assert any(n.startswith(f"{MP}.") and "rfthpc reduces gradients across GPUs in float32" in n for n in
               imported.notes)
    with pytest.raises(ConfigError, match=rf"{MP}.reduce_dtype: .*rfthpc reduces gradients in float32"):
        import_verl(CONFIG, [f"+{MP}.reduce_dtype=fp16"], script=SCRIPT, environ=ENV)


def test_a_megatron_actor_is_imported_as_fsdp2_with_the_same_updates() -> None:
    megatron = "actor_rollout_ref.actor.megatron"
    imported = import_verl(CONFIG, [
        "actor_rollout_ref.actor.strategy=megatron", f"+{megatron}.tensor_model_parallel_size=4",
        f"+{megatron}.pipeline_model_parallel_size=2", f"+{megatron}.param_offload=true",
        f"+{megatron}.override_transformer_config.recompute_granularity=full",
        f"+{megatron}.override_transformer_config.moe_permute_fusion=true",
        "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=true",
        "+actor_rollout_ref.actor.optim.override_optimizer_config.use_precision_aware_optimizer=true",
    ], script=SCRIPT, environ=ENV)
    notes = "\n".join(imported.notes)
    assert ("actor_rollout_ref.actor.strategy: megatron: rfthpc trains with FSDP2 instead of Megatron-LM" in notes and
            "(tensor_model_parallel_size 4, pipeline_model_parallel_size 2)" in notes)
    trainer = imported.config["trainer"]
    assert trainer["param_offload"] and trainer["optimizer_offload"] and trainer["enable_gradient_checkpointing"]
    # The same batches, learning rate and schedule as the FSDP run of the same script.
    fsdp = import_verl(CONFIG, script=SCRIPT, environ=ENV).config
    assert imported.config["algorithm"]["optimizer"] == fsdp["algorithm"]["optimizer"]
    assert imported.config["buffer"]["batch_size"] == fsdp["buffer"]["batch_size"]
    assert all(trainer[k] == fsdp["trainer"][k] for k in ("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu")
               if k in fsdp["trainer"])
