"""Round trip through rfthpc's own trainer: 2-rank training -> checkpoint -> convert -> transformers, vLLM."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rfthpc.cli import main as rfthpc_main
from rfthpc.weights.published import step_dir

pytestmark = pytest.mark.slow


def _state(hf_dir: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(hf_dir).state_dict()


def test_trainer_checkpoint_converts_to_exactly_the_trainers_full_weights(
    trained_run: Path, tmp_path: Path, tiny_base: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("experiences", "weights"))
    actor = run / "global_step_2" / "actor"
    # The trainer's own merged copy counts as converted ...
    assert rfthpc_main(["convert", "--checkpoint-dir", str(run), "--no-progress"]) == 0
    assert "skipped" in capsys.readouterr().out
    # ... and, moved aside, is the reference the conversion must reproduce.
    trainer_hf = tmp_path / "trainer_hf"
    shutil.move(actor / "huggingface", trainer_hf)
    assert rfthpc_main(["convert", "--checkpoint-dir", str(run), "--no-progress"]) == 0
    assert f"{actor}: converted" in capsys.readouterr().out

    got, want = _state(actor / "huggingface"), _state(trainer_hf)
    published = _state(step_dir(trained_run, 2))
    base = _state(tiny_base)
    assert set(got) == set(want) == set(published)
    assert all(torch.equal(got[k], want[k]) and torch.equal(got[k], published[k]) for k in got)
    assert any(not torch.equal(got[k], base[k]) for k in got)  # training moved the weights
    meta = json.loads((actor / "rfthpc_checkpoint.json").read_text())
    config = json.loads((actor / "huggingface" / "config.json").read_text())
    assert meta["world_size"] == 2 and config["dtype"] == meta["dtype"] == "float32"
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (actor / "huggingface" / name).is_file(), name


_VLLM_SCRIPT = r"""
import json, sys
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=128, enforce_eager=True,
          distributed_executor_backend="uni", seed=0)
prompt = llm.get_tokenizer().apply_chat_template([{"role": "user", "content": "What is 3 + 4?"}],
                                                 add_generation_prompt=True, tokenize=True, return_dict=False)
out = llm.generate([{"prompt_token_ids": list(prompt)}], SamplingParams(temperature=0.0, max_tokens=10, logprobs=0))
c = out[0].outputs[0]
print("RESULT " + json.dumps({"prompt": list(prompt), "tokens": list(c.token_ids),
                              "logprobs": [d[t].logprob for t, d in zip(c.token_ids, c.logprobs)]}))
"""


@pytest.mark.vllm
def test_vllm_cpu_generates_from_the_converted_checkpoint(trained_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_run / "global_step_2", run / "global_step_2", ignore=shutil.ignore_patterns("huggingface"))
    assert rfthpc_main(["convert", "--checkpoint-dir", str(run), "--no-progress"]) == 0
    hf = run / "global_step_2" / "actor" / "huggingface"
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _VLLM_SCRIPT, str(hf)], capture_output=True, text=True, timeout=400, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert len(result["tokens"]) >= 1
    from transformers import AutoModelForCausalLM

    # vLLM's log-probs are those of the converted (trained) weights.
    model = AutoModelForCausalLM.from_pretrained(hf)
    ids = torch.tensor([result["prompt"] + result["tokens"]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    n = len(result["prompt"])
    expected = [logp[n - 1 + i, t].item() for i, t in enumerate(result["tokens"])]
    assert result["logprobs"] == pytest.approx(expected, abs=1e-4)
