"""An explorer of a LoRA run starts its engine on the base model and applies the published adapter: its
behaviour log-probabilities are those of the base with that adapter."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from rfthpc.weights.published import TensorStream
from rfthpc.weights.publisher import Publisher
from tests.engines.helpers import forward_logprobs, load_hf
from tests.explorer_loop.conftest import explorer, groups, make_run, taskset, write_jsonl
from tests.trainer.test_lora import random_adapter


def test_an_explorer_applies_the_published_adapter_to_its_base_model(tmp_path: Path, tiny_model: Path,
                                                                      questions) -> None:
    from peft import PeftModel

    data = write_jsonl(tmp_path / "train.jsonl", questions[:2])
    run = make_run(tmp_path, tiny_model, [taskset("arith", data)],
                   # No minimum length: it would mask the end token at the first position, which the
                   # plain forward pass below does not.
                   model={"lora": {"lora_rank": 8, "lora_alpha": 16}, "min_response_tokens": 0})
    adapter = random_adapter(tiny_model, tmp_path / "adapter")
    # Published as the trainer publishes version 3 of a LoRA run.
    config = json.loads((adapter / "adapter_config.json").read_text())
    Publisher(run, tiny_model, torch.float32, adapter_config=config).publish(
        3, TensorStream.of(load_file(str(adapter / "adapter_model.safetensors"))))
    assert explorer(run).run() == 0

    peft = PeftModel.from_pretrained(load_hf(tiny_model), adapter).eval()
    base = load_hf(tiny_model)
    committed = groups(run)
    assert len(committed) == 2 and all(g.policy_version == 3 for g in committed)
    for g in committed:
        for e in g.experiences:
            got = torch.tensor(e.logprobs)
            assert float((got - forward_logprobs(peft, e.prompt_ids, e.response_ids)).abs().max()) <= 1e-4
            assert float((got - forward_logprobs(base, e.prompt_ids, e.response_ids)).abs().max()) > 1e-3
