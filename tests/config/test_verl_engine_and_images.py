"""veRL's rollout engine arguments and vision-language runs, through `config import --from verl`: vLLM's
`engine_kwargs` reach rfthpc's engine (checked by name), another engine's are refused for that engine, and a
run on images is refused once, first, for its images (never for an image cache flag)."""

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


def test_another_engines_arguments_are_refused_for_that_engine_only_when_it_runs() -> None:
    message = _refused("actor_rollout_ref.rollout.name=sglang", f"+{KW}.sglang.attention_backend=triton")
    assert f"{KW}.sglang: {{\"attention_backend\": \"triton\"}}: arguments of SGLang, which rfthpc does not have" \
        in message
    imported = import_verl(CONFIG, [f"+{KW}.sglang.attention_backend=triton"], script=SCRIPT, environ=ENV)
    assert any(n.startswith(f"{KW}.sglang: no effect") for n in imported.notes)


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
