"""`engine_kwargs`: vLLM engine arguments a config passes through, checked by name against the installed
vLLM when the config is validated, and given to the engine (in-process `LLM`, or a shared server's flags)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.dialects.vllm_args import kwargs_problems, vllm_arg_names
from rfthpc.engines import EngineSettings
from rfthpc.engines.server import server_flags, vllm_command
from rfthpc.errors import ConfigError
from tests.engines.serve_script import JUDGE

RM = "explorer.rollout_model"


def test_the_names_are_read_from_the_installed_vllm_without_importing_it() -> None:
    import sys

    loaded = "vllm.engine.arg_utils" in sys.modules
    names = vllm_arg_names()
    assert names is not None and {"max_num_seqs", "enable_prefix_caching", "mm_processor_cache_gb"} <= names
    assert ("vllm.engine.arg_utils" in sys.modules) == loaded


def test_each_wrong_name_is_a_problem_naming_it_and_the_fix() -> None:
    names = frozenset({"max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype"})
    problems = kwargs_problems(RM, {"max_num_seqs": 64, "max_num_seq": 1, "kv_cache_dtype": "fp8",
                                    "enable_prefix_caching": True, "logprobs_mode": "raw_logprobs",
                                    "max_lora_rank": 64}, "vllm", names)
    assert problems == [
        f"{RM}.engine_kwargs.max_num_seq: not an argument of the installed vLLM's engine "
        "(vllm.engine.arg_utils.EngineArgs) (did you mean max_num_seqs?); fix its name, or remove it",
        f"{RM}.engine_kwargs.enable_prefix_caching: rfthpc sets it from {RM}.enable_prefix_caching; set that instead",
        f"{RM}.engine_kwargs.logprobs_mode: cannot be changed: rfthpc records the log-probabilities of the "
        "distribution each token was sampled from (processed_logprobs), which its losses expect; remove it",
        f"{RM}.engine_kwargs.max_lora_rank: rfthpc sets it from model.lora.lora_rank; set that instead",
    ]
    assert kwargs_problems(RM, {"max_num_seqs": 64}, "transformers", names) == [
        f"{RM}.engine_kwargs: vLLM's engine arguments, but engine_type is transformers, which reads none; remove "
        "them, or use engine_type vllm"]


def test_validation_refuses_an_unknown_engine_argument(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "data.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    config = tmp_path / "c.yaml"
    config.write_text(textwrap.dedent(f"""
        model: {{model_path: {tmp_path / 'model'}, max_prompt_tokens: 64, max_response_tokens: 32}}
        cluster: {{node_num: 1, gpu_per_node: 2}}
        buffer:
          batch_size: 4
          explorer_input:
            taskset:
              {{name: t, path: {tmp_path / 'data.jsonl'}, format: {{prompt_key: question, response_key: answer}}}}
            default_workflow_type: math_workflow
        explorer:
          rollout_model: {{engine_kwargs: {{max_num_seqs: 64, disable_mm_preprocessor_cache: true}}}}
        """))
    with pytest.raises(ConfigError, match=r"explorer.rollout_model.engine_kwargs.disable_mm_preprocessor_cache: not "
                                          r"an argument of the installed vLLM's engine .*did you mean") as e:
        load_config(config)
    assert "max_num_seqs" not in str(e.value)
    config.write_text(config.read_text().replace(", disable_mm_preprocessor_cache: true", ""))
    loaded = load_config(config)
    assert loaded.config.explorer.rollout_model.engine_kwargs == {"max_num_seqs": 64}


def test_the_engine_gets_them_after_rfthpcs_own(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    from rfthpc.engines.vllm_engine import llm_kwargs

    settings = EngineSettings(str(tmp_path), seed=3, engine_kwargs={"max_num_seqs": 64, "kv_cache_dtype": "fp8"})
    kwargs = llm_kwargs(settings, on_cpu=False)
    assert kwargs["max_num_seqs"] == 64 and kwargs["kv_cache_dtype"] == "fp8"
    assert kwargs["seed"] == 3 and kwargs["logprobs_mode"] == "processed_logprobs"
    assert "max_num_seqs" not in llm_kwargs(dataclasses.replace(settings, engine_kwargs={}), on_cpu=False)


def test_a_shared_server_gets_them_as_flags() -> None:
    kwargs = {"max_num_seqs": 64, "enable_expert_parallel": True, "disable_log_stats": False,
              "cudagraph_capture_sizes": [1, 2], "limit_mm_per_prompt": {"image": 0}}
    flags = ["--max-num-seqs", "64", "--enable-expert-parallel", "--no-disable-log-stats",
             "--cudagraph-capture-sizes", "1", "2", "--limit-mm-per-prompt", '{"image": 0}']
    assert server_flags(kwargs) == flags
    argv = vllm_command(dataclasses.replace(JUDGE, engine_kwargs=kwargs), 0, 4242, on_cpu=False)
    assert argv[-len(flags):] == flags
