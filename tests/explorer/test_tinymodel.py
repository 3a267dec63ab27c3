"""The tiny model tool: what it writes loads in transformers and in vLLM's CPU engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rfthpc.demos.tinymodel import IM_END, PAD_TOKEN, SIZES, build_tiny_model, main, parameter_count
from rfthpc.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def _sequence_logprobs(model, prompt: list[int], response: list[int]) -> list[float]:
    """log p(response_t | prompt, response_<t) from one float32 forward pass."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    positions = torch.arange(len(prompt) - 1, len(prompt) + len(response) - 1)
    return logp[positions, torch.tensor(response)].tolist()


def test_tiny_model_loads_and_generates_in_transformers(tiny_model: Path, tiny_tokenizer) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    config = model.config
    assert config.model_type == "qwen2" and config.tie_word_embeddings
    assert config.hidden_size // config.num_attention_heads in (32, 64)  # vLLM CPU attention head sizes
    assert next(model.parameters()).dtype == torch.float32
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == parameter_count("tiny", config.vocab_size)
    assert 90_000 <= n_params <= 1_000_000
    assert len(tiny_tokenizer) == config.vocab_size

    ids = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    out = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)
    assert out.shape[1] > len(ids)


def test_tokenizer_and_chat_template_are_qwen_style(tiny_tokenizer) -> None:
    tok = tiny_tokenizer
    assert tok.eos_token == IM_END and tok.pad_token == PAD_TOKEN
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    # Digits are one token each, so a small model can learn column arithmetic.
    pieces = tok.convert_ids_to_tokens(tok.encode("1234", add_special_tokens=False))
    assert pieces == ["1", "2", "3", "4"]
    sample = "Tom has 12 apples.\n12 + 30 = 42\n#### 42 \\boxed{42} é"
    assert tok.decode(tok.encode(sample, add_special_tokens=False)) == sample
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert len(tok.encode(special, add_special_tokens=False)) == 1


def test_assistant_mask_covers_the_answer_and_its_end_token(tiny_tokenizer) -> None:
    tok = tiny_tokenizer
    out = tok.apply_chat_template(
        [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "#### 7"}],
        tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
    )
    masked = [t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tok.decode(masked) == "#### 7<|im_end|>"


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path) -> None:
    a = build_tiny_model(tmp_path / "a", "tiny", seed=3)
    b = build_tiny_model(tmp_path / "b", "tiny", seed=3)
    c = build_tiny_model(tmp_path / "c", "tiny", seed=4, tie_word_embeddings=False)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()
    untied = AutoModelForCausalLM.from_pretrained(c)
    assert not untied.config.tie_word_embeddings
    assert untied.lm_head.weight.data_ptr() != untied.model.embed_tokens.weight.data_ptr()


def test_sizes_have_vllm_head_dims_and_advertised_parameter_counts() -> None:
    for shape in SIZES.values():
        assert shape.hidden_size // shape.num_attention_heads in (32, 64, 80, 96, 112, 128)
        assert shape.num_attention_heads % shape.num_key_value_heads == 0
    assert 2e6 <= parameter_count("small", SIZES["small"].vocab_target) <= 6e6
    assert 25e6 <= parameter_count("bench30m", 550) <= 35e6


def test_unknown_size_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="choose one of"):
        build_tiny_model(tmp_path, "huge")  # type: ignore[arg-type]


def test_cli_builds_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path / "cli"), "--size", "tiny", "--no-tie-word-embeddings"]) == 0
    assert "0.12M parameters, vocab 384" in capsys.readouterr().out
    assert not AutoModelForCausalLM.from_pretrained(tmp_path / "cli").config.tie_word_embeddings


@pytest.mark.slow
def test_tool_script_builds_the_same_model(tmp_path: Path) -> None:
    build_tiny_model(tmp_path / "cli", "tiny", seed=1)
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "make_tiny_model.py"), "--out", str(tmp_path / "tool"), "--seed", "1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    tool_weights = (tmp_path / "tool" / "model.safetensors").read_bytes()
    assert tool_weights == (tmp_path / "cli" / "model.safetensors").read_bytes()


_VLLM_SCRIPT = r"""
import json, sys
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=256, enforce_eager=True,
          distributed_executor_backend="uni", seed=0)
tok = llm.get_tokenizer()
prompt = tok.apply_chat_template([{"role": "user", "content": "Tom has 3 apples. He buys 4 more."}],
                                 add_generation_prompt=True, tokenize=True, return_dict=False)
out = llm.generate([{"prompt_token_ids": list(prompt)}],
                   SamplingParams(n=3, temperature=1.0, max_tokens=12, logprobs=0, seed=0))
samples = [{"token_ids": list(c.token_ids), "text": c.text,
            "logprobs": [d[t].logprob for t, d in zip(c.token_ids, c.logprobs)]} for c in out[0].outputs]
print("RESULT " + json.dumps({"prompt": list(prompt), "samples": samples}))
"""


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_cpu_engine_loads_and_generates_matching_logprobs(tiny_model: Path, tiny_tokenizer) -> None:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _VLLM_SCRIPT, str(tiny_model)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert len(result["samples"]) == 3
    for sample in result["samples"]:
        assert 1 <= len(sample["token_ids"]) <= 12
        # vLLM's incremental detokenizer holds back a trailing incomplete UTF-8 sequence.
        assert tiny_tokenizer.decode(sample["token_ids"], skip_special_tokens=True).startswith(sample["text"])
        expected = _sequence_logprobs(model, result["prompt"], sample["token_ids"])
        assert sample["logprobs"] == pytest.approx(expected, abs=1e-5)
