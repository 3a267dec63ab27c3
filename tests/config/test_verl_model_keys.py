"""veRL settings of its example scripts that rfthpc follows its own way: remote code and the FSDP reduce
dtype are noted, not refused; a Megatron-LM actor becomes FSDP2; several training files one taskset."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.dialects.verl_import import import_verl
from rfthpc.errors import ConfigError
from tests.config.test_verl_import import CONFIG, ENV, SCRIPT, parquet

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


def test_several_train_files_are_one_taskset_of_all_their_rows(tmp_path: Path) -> None:
    """veRL concatenates data.train_files into one dataset: every row weighs the same."""
    from rfthpc.config import load_config
    from rfthpc.explorer.setup import load

    gsm8k = parquet(tmp_path / "gsm8k" / "train.parquet", ["openai/gsm8k"] * 3)
    math = parquet(tmp_path / "math" / "train.parquet", ["lighteval/MATH"] * 2)
    imported = import_verl(CONFIG, [f"data.train_files=['{gsm8k}','{math}']", f"data.val_files=['{gsm8k}']"],
                           script=SCRIPT, environ=ENV)
    (taskset,) = imported.config["buffer"]["explorer_input"]["tasksets"]
    assert taskset["path"] == [str(gsm8k), str(math)]
    assert "data.train_files (2 files, concatenated as veRL does)" in imported.text
    out = tmp_path / "grpo.yaml"
    out.write_text(imported.text)
    cfg = load_config(out, check_paths=False).config
    tasks = load(cfg.buffer.explorer_input.tasksets[0], is_eval=False).tasks
    assert [t.truth for t in tasks] == ["0", "2", "4", "0", "2"]  # the rows of both files, in order
    load_config(out, overrides=[f"--model.model_path={tmp_path}"])  # both files' columns checked
    out.write_text(imported.text.replace('messages_key: "prompt"', 'messages_key: "chat"'))
    with pytest.raises(ConfigError, match=r"tasksets\[0\] \(.*math/train.parquet, split 'train'\)"):
        load_config(out, overrides=[f"--model.model_path={tmp_path}"])
    missing = imported.text.replace(str(math), str(tmp_path / "nope.parquet"))
    out.write_text(missing)
    with pytest.raises(ConfigError, match=r"buffer.explorer_input.tasksets\[0\].path\[1\]: .*nope.parquet' does not "
                                          r"exist"):
        load_config(out, overrides=[f"--model.model_path={tmp_path}"])


def test_a_megatron_lora_adapter_becomes_model_lora_on_hugging_face_layers() -> None:
    lora = "actor_rollout_ref.model.lora"
    imported = import_verl(CONFIG, ["actor_rollout_ref.actor.strategy=megatron", f"+{lora}.rank=16",
                                    f"+{lora}.alpha=32", f"+{lora}.target_modules=[linear_qkv,linear_fc2]",
                                    f"+{lora}.lora_A_init_method=kaiming"], script=SCRIPT, environ=ENV)
    assert imported.config["model"]["lora"] == {"lora_rank": 16, "lora_alpha": 32, "lora_dropout": 0.0,
                                                "target_modules": ["q_proj", "k_proj", "v_proj", "down_proj"]}
    with pytest.raises(ConfigError, match=rf"{lora}.target_modules: linear_gate: not a Megatron-LM linear layer"):
        import_verl(CONFIG, ["actor_rollout_ref.actor.strategy=megatron", f"+{lora}.rank=16",
                             f"+{lora}.target_modules=[linear_gate]"], script=SCRIPT, environ=ENV)


def test_the_dapo_reward_manager_is_the_data_sources_score_with_its_overlong_penalty() -> None:
    cfg = "reward_model.reward_kwargs.overlong_buffer_cfg"
    imported = import_verl(CONFIG, ["+reward_model.reward_manager=dapo", f"+{cfg}.enable=true", f"+{cfg}.len=128",
                                    f"+{cfg}.penalty_factor=1.0"], script=SCRIPT, environ=ENV)
    assert imported.config["algorithm"]["overlong_buffer"] == {"enable": True, "len": 128, "penalty_factor": 1.0}
    assert any(n.startswith("reward_model.reward_manager: veRL's naive and dapo reward managers") for n in
               imported.notes)


def test_a_rollout_engine_larger_than_a_node_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"tensor_model_parallel_size: 16: an engine of 16 GPUs spans nodes of 8"):
        import_verl(CONFIG, ["actor_rollout_ref.rollout.tensor_model_parallel_size=16", "trainer.nnodes=4"],
                    script=SCRIPT, environ=ENV)
