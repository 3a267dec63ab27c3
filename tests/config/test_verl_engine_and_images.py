"""veRL's rollout engine arguments and vision-language runs, through `config import --from verl`: vLLM's
`engine_kwargs` reach rfthpc's engine (checked by name), another engine's are noted where they only tune its
speed and refused otherwise, a model config override of the position limit is read, and a run on images is refused once, first, for its images (never for an image cache flag)."""

from __future__ import annotations

import pytest

from rfthpc.dialects.verl_import import import_verl
from rfthpc.errors import ConfigError
from tests.config.test_verl_import import CONFIG, ENV, SCRIPT

KW = "actor_rollout_ref.rollout.engine_kwargs"


def _refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        import_verl(CONFIG, list(overrides), script=SCRIPT, environ=ENV)
    return str(e.value)


def test_vllms_engine_arguments_reach_the_rollout_model() -> None:
    imported = import_verl(CONFIG, [f"+{KW}.vllm.max_num_seqs=64", f"+{KW}.vllm.enable_prefix_caching=true"],
                           script=SCRIPT, environ=ENV)
    rollout = imported.config["explorer"]["rollout_model"]
    assert rollout["engine_kwargs"] == {"max_num_seqs": 64} and rollout["enable_prefix_caching"] is True
    assert f"max_num_seqs: 64  # {KW}.vllm.max_num_seqs" in imported.text


def test_an_unknown_vllm_argument_is_named_with_a_close_match() -> None:
    message = _refused(f"+{KW}.vllm.max_num_seq=64", f"+{KW}.vllm.logprobs_mode=raw_logprobs")
    assert f"{KW}.vllm.max_num_seq: 64: not an argument of the installed vLLM's engine" in message
    assert "(did you mean max_num_seqs?)" in message
    assert f"{KW}.vllm.logprobs_mode: \"raw_logprobs\": cannot be changed" in message


def test_another_engines_speed_arguments_are_noted_and_its_others_refused() -> None:
    imported = import_verl(CONFIG, ["actor_rollout_ref.rollout.name=sglang", f"+{KW}.sglang.attention_backend=ascend"],
                           script=SCRIPT, environ=ENV)
    assert imported.config["explorer"]["rollout_model"]["engine_type"] == "vllm"
    assert any(n.startswith(f"{KW}.sglang.attention_backend: \"ascend\": tunes SGLang's speed only")
               for n in imported.notes)
    imported = import_verl(CONFIG, ["actor_rollout_ref.rollout.name=trtllm", f"+{KW}.trtllm.batch_wait_timeout_iters=32",
                                    f"+{KW}.trtllm.batch_wait_max_tokens_ratio=0.5"], script=SCRIPT, environ=ENV)
    assert sum("tunes TensorRT-LLM's speed only" in n for n in imported.notes) == 2
    message = _refused("actor_rollout_ref.rollout.name=sglang", f"+{KW}.sglang.attention_backend=triton",
                       f"+{KW}.sglang.random_seed=3")
    assert f"{KW}.sglang.random_seed: 3: an argument of SGLang, which rfthpc does not have" in message
    assert "attention_backend" not in message
    imported = import_verl(CONFIG, [f"+{KW}.sglang.random_seed=3"], script=SCRIPT, environ=ENV)
    assert any(n.startswith(f"{KW}.sglang: no effect") for n in imported.notes)


@pytest.mark.parametrize("form", ["model_config.max_position_embeddings", "max_position_embeddings"])
def test_a_position_limit_covering_the_runs_sequences_is_noted(form: str) -> None:
    key = f"actor_rollout_ref.model.override_config.{form}"
    imported = import_verl(CONFIG, [f"+{key}=4096"], script=SCRIPT, environ=ENV)
    assert any(n.startswith(f"{key}: 4096: no effect in rfthpc") for n in imported.notes)
    assert imported.config["model"]["model_path"]  # the model's path, read beside it, is still translated
    assert f"{key}: 100: shorter than the run's sequences" in _refused(f"+{key}=100")
    assert "override_config.model_config.num_hidden_layers: veRL key not supported by rfthpc: changes the " \
        "model's Hugging Face config" in _refused(f"+{key}=4096", "+actor_rollout_ref.model.override_config."
                                                                   "model_config.num_hidden_layers=2")


def test_a_position_limit_is_refused_where_the_models_rope_scaling_reads_it(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}')
    message = _refused(f"actor_rollout_ref.model.path={tmp_path}",
                       "+actor_rollout_ref.model.override_config.max_position_embeddings=4096")
    assert "max_position_embeddings: 4096: the model's yarn rope scaling reads this value" in message


def test_a_vision_language_run_is_refused_once_and_first_for_its_images() -> None:
    message = _refused("actor_rollout_ref.model.path=Qwen/Qwen2.5-VL-7B-Instruct",
                       "data.train_files=/d/geo3k/train.parquet", "data.val_files=/d/geo3k/test.parquet",
                       f"+{KW}.vllm.disable_mm_preprocessor_cache=true",
                       "+actor_rollout_ref.actor.freeze_vision_tower=true", "trainer.resume_mode=resume_path")
    problems = [line for line in message.splitlines() if line.startswith("  - ")]
    assert problems[0].startswith("  - data.image_key: multimodal inputs (images, videos) are not in rfthpc")
    assert "Qwen/Qwen2.5-VL-7B-Instruct is a vision-language model" in problems[0]
    assert len(problems) == 2 and problems[1].startswith("  - trainer.resume_mode")  # the others still listed
    assert "disable_mm_preprocessor_cache: true" not in message.replace(problems[0], "")
    assert "freeze_vision_tower" not in message.replace(problems[0], "")


@pytest.mark.parametrize("model", ["Qwen/Qwen2.5-VL-3B-Instruct", "zai-org/GLM-4.1V-9B-Thinking",
                                   "openbmb/MiniCPM-o-2_6", "/models/Qwen3-VL-8B-Instruct"])
def test_vision_language_models_are_known_by_name(model: str) -> None:
    assert "is a vision-language model" in _refused(f"actor_rollout_ref.model.path={model}")


def test_text_models_are_not_taken_for_vision_language_ones() -> None:
    for model in ("Qwen/Qwen2.5-7B-Instruct", "deepseek-ai/DeepSeek-V3", "moonshotai/Moonlight-16B-A3B"):
        import_verl(CONFIG, [f"actor_rollout_ref.model.path={model}"], script=SCRIPT, environ=ENV)


def test_an_empty_engine_kwargs_mapping_takes_new_keys_without_a_plus() -> None:
    imported = import_verl(CONFIG, [f"{KW}.vllm.max_num_seqs=64"], script=SCRIPT, environ=ENV)
    assert imported.config["explorer"]["rollout_model"]["engine_kwargs"] == {"max_num_seqs": 64}
    with pytest.raises(ConfigError, match=r"data.no_such_key is not in the config; to add it, write \+"):
        import_verl(CONFIG, ["data.no_such_key=1"], script=SCRIPT, environ=ENV)
