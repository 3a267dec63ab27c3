"""A LoRA run's hand-off through the run directory: the trainer publishes adapters (PEFT layout), the
explorer's follower stages them, and each engine applies them to its base model in place; the
log-probabilities of its samples are then the trainer's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.config.lora import LoRAConfig, LoRASettings
from rfthpc.engines.base import GenerateRequest, make_engine
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import UserError
from rfthpc.rundir.paths import RunDir
from rfthpc.trainer.samples import Sample
from rfthpc.weights import published as weights
from rfthpc.weights.follow import WeightFollower
from tests.engines.helpers import forward_logprobs, load_hf
from tests.engines.test_engines import TOL, prompts, settings
from tests.trainer.conftest import make_run, run_trainer_inprocess, write_groups
from tests.trainer.test_lora import lora_config

STEPS = 2


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> RunDir:
    """A LoRA run the trainer trained for 2 steps (a large learning rate: the adapter moves far)."""
    cfg = lora_config(tiny_model, **{"buffer.total_steps": STEPS, "synchronizer.keep_published": 8,
                                     "algorithm.optimizer.lr": 0.05})
    run = make_run(tmp_path_factory.mktemp("lora_run") / "run", cfg)
    write_groups(run, 2 * STEPS)
    assert run_trainer_inprocess(run) == 0
    return run


def trainer_logprobs(model_dir: Path, adapter: Path, prompt: list[int], response: list[int]) -> torch.Tensor:
    """The log-probabilities the trainer computes for `response`: its sharded peft model, with the adapter
    it published at `adapter`."""
    from rfthpc.trainer.batching import collate
    from rfthpc.trainer.dist import init_distributed
    from rfthpc.trainer.forward import token_logprobs
    from rfthpc.trainer.fsdp import build_sharded_model

    env = init_distributed()
    try:
        policy = build_sharded_model(model_dir, env, lora=LoRASettings.of(LoRAConfig(path=str(adapter))))
        n = len(response)
        mb = collate([Sample(np.array(prompt), np.array(response), np.ones(n, bool))], [0], torch.device("cpu"))
        with torch.no_grad():
            return token_logprobs(policy, mb)[0][0, :n]
    finally:
        env.close()


def greedy(engine, prompt: list[int]):
    return engine.generate_batch([GenerateRequest(prompt, 1, SamplingArgs(temperature=0.0, max_tokens=8))])[0][0]


def check_lora_handoff(engine_type: str, model_dir: Path, run: RunDir, tmp_path: Path) -> None:
    lora = LoRASettings.of(LoRAConfig(lora_rank=8, lora_alpha=16))
    engine = make_engine(engine_type, dataclasses.replace(settings(model_dir), lora=lora))
    follower = WeightFollower(run, "ex", 0, staging_root=tmp_path / "staging")
    try:
        prompt = prompts(model_dir)[1]
        # Version 0, as an explorer starts before the trainer has trained: the new adapter (B = 0).
        engine.load_weights(weights.step_dir(run.root, 0))
        first = greedy(engine, prompt)
        base = forward_logprobs(load_hf(model_dir), prompt, first.token_ids, temperature=0.0)
        assert float((torch.tensor(first.logprobs) - base).abs().max()) <= TOL

        # Version 2 the explorer's way: rebuilt into node-local staging, then loaded in place.
        follower.attach(engine, 0, background=False)
        assert follower.prefetch(STEPS) and follower.update() and follower.version == STEPS
        staged = next((tmp_path / "staging").rglob(f"v{STEPS}"))
        assert sorted(p.name for p in staged.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
        after = greedy(engine, prompt)
        # The base alone no longer explains the samples: the adapter was applied.
        base = forward_logprobs(load_hf(model_dir), prompt, after.token_ids, temperature=0.0)
        assert float((torch.tensor(after.logprobs) - base).abs().max()) > 1e-3

        with pytest.raises(UserError, match="applies LoRA adapters to its base model"):
            engine.load_weights(model_dir)
    finally:
        follower.close()
        engine.close()
    # After the engine is gone: the trainer's process group must not outlive vLLM's own in this process.
    want = trainer_logprobs(model_dir, weights.step_dir(run.root, STEPS), prompt, after.token_ids)
    assert float((torch.tensor(after.logprobs) - want).abs().max()) <= 1e-4


def test_transformers_engine_applies_each_published_adapter(tiny_model: Path, lora_run: RunDir,
                                                            tmp_path: Path) -> None:
    check_lora_handoff("transformers", tiny_model, lora_run, tmp_path)


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_engine_applies_each_published_adapter_under_a_new_id(tiny_model: Path, lora_run: RunDir,
                                                                  tmp_path: Path) -> None:
    check_lora_handoff("vllm", tiny_model, lora_run, tmp_path)
