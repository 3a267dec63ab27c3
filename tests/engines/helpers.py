"""Reference computations shared by the engine and explorer-loop tests: a transformers forward pass
of the same weights, publishing changed weights the way the trainer does (`rfthpc.weights`), and an
engine that dies mid-run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from rfthpc.engines.base import EngineSettings, GenerateRequest
from rfthpc.engines.hf_engine import TransformersEngine
from rfthpc.engines.sampling import Completion
from rfthpc.weights import published as weights


def load_hf(model_dir: Path):
    """The model in `model_dir` as a float32 transformers model."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def forward_logprobs(
    model, prompt: Sequence[int], response: Sequence[int], temperature: float = 1.0, top_k: int = -1
) -> torch.Tensor:
    """log softmax(logits / T)[token] of each response token (T = 0: no scaling), with an optional
    top-k cut (the distribution the engine sampled from)."""
    ids = torch.tensor([list(prompt) + list(response)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    if temperature > 0:
        logits = logits / temperature
    if top_k > 0:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(list(response))[:, None])[:, 0]


def changed_state_dict(model_dir: Path, seed: int, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """The weights of `model_dir` plus seeded noise, without the tied output layer (safetensors
    stores shared tensors once, as `save_pretrained` does)."""
    model = load_hf(model_dir)
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    return {
        k: v.detach().clone() + scale * torch.randn(v.shape, generator=gen) * v.detach().std().clamp(min=1e-3)
        for k, v in model.state_dict().items()
        if not (tied and k == "lm_head.weight")
    }


def publish_changed(run_dir: Path, step: int, model_dir: Path, seed: int) -> Path:
    """Publish changed weights as `weights/step_<step>` like the trainer; return a transformers model
    directory holding the same weights (the published one, which the explorer may later delete)."""
    return weights.publish(run_dir, step, changed_state_dict(model_dir, seed), config_dir=model_dir)


class DyingEngine(TransformersEngine):
    """The transformers engine on a real model, whose generate calls fail like those of a dead vLLM engine
    (EngineDeadError, every call from then on) once it has served `requests` requests.

    A test double of an engine failure: a real one (CUDA out of memory, an Xid or NCCL error) cannot be
    produced on CPU. Everything else, the generation before it dies included, is the real engine.
    """

    def __init__(self, settings: EngineSettings, requests: int) -> None:
        super().__init__(settings)
        self.requests_left = requests

    def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Completion]]:
        """Generate, or raise EngineDeadError once more requests come than are left."""
        from vllm.v1.engine.exceptions import EngineDeadError

        if len(requests) > self.requests_left:
            self.requests_left = 0
            raise EngineDeadError()
        self.requests_left -= len(requests)
        return super().generate_batch(requests)
