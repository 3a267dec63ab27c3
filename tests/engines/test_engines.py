"""Both rollout engines on the tiny model: behaviour logprobs equal a transformers forward pass of the
same weights (float32, 1e-5), under temperature, top-k and greedy decoding, before and after an
in-place weight update from a published step directory; so do the top alternatives a request asks
for (`rollout_args.logprobs`); a seeded request (`rollout_args.seed`) gives the same samples
whatever it is batched with; a temperature below vLLM's greedy threshold (1e-5) is greedy decoding; as a
distillation teacher each scores given tokens as that forward pass does."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from rfthpc.engines import EngineSettings, GenerateRequest, make_engine
from rfthpc.engines.base import PromptTooLong, RequestRejected, check_prompt_fits
from rfthpc.engines.batching import split_samples
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import UserError
from rfthpc.explorer.teacher import score_with_teacher
from rfthpc.workflows.base import Experience
from tests.engines.helpers import forward_logprobs, load_hf, publish_changed

TOL = 1e-5


def prompts(model_dir: Path) -> list[list[int]]:
    """Chat prompts of different lengths (the transformers engine left-pads them into one batch)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    questions = ["What is 2 plus 3?", "Tom has 12 apples and buys 7 more. How many apples does Tom have now?", "Hi"]
    return [
        list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                     tokenize=True, return_dict=False))
        for q in questions
    ]


def requests(model_dir: Path) -> list[GenerateRequest]:
    p = prompts(model_dir)
    return [
        GenerateRequest(p[0], 3, SamplingArgs(temperature=0.7, max_tokens=12)),
        GenerateRequest(p[1], 2, SamplingArgs(temperature=1.0, top_k=5, max_tokens=10)),
        GenerateRequest(p[2], 2, SamplingArgs(temperature=0.0, max_tokens=8)),
        GenerateRequest(p[2], 2, SamplingArgs(temperature=0.7, max_tokens=12)),
    ]


def max_logprob_error(engine, reqs: list[GenerateRequest], reference_dir: Path) -> float:
    """Generate `reqs` and return the largest |engine logprob - forward logprob| over all tokens."""
    results = engine.generate_batch(reqs)
    model = load_hf(reference_dir)
    worst = 0.0
    for r, completions in zip(reqs, results, strict=True):
        assert len(completions) == r.n
        for c in completions:
            assert 1 <= len(c.token_ids) <= r.params.max_tokens
            assert len(c.logprobs) == len(c.token_ids)
            assert c.finish_reason in ("stop", "length")
            assert c.finish_reason == "stop" or len(c.token_ids) == r.params.max_tokens
            ref = forward_logprobs(model, r.prompt_token_ids, c.token_ids, r.params.temperature, r.params.top_k)
            worst = max(worst, float((torch.tensor(c.logprobs) - ref).abs().max()))
            if r.params.temperature == 0:
                with torch.no_grad():
                    logits = model(torch.tensor([list(r.prompt_token_ids) + c.token_ids])).logits[0]
                greedy = logits[len(r.prompt_token_ids) - 1 : -1].argmax(-1).tolist()
                assert c.token_ids == greedy
    return worst


def check_top_logprobs(engine, model_dir: Path) -> None:
    """Top-3 alternatives per token are the 3 best of the sampled-from distribution; with top_k=2 the
    cut-away tokens are left out."""
    p = prompts(model_dir)
    reqs = [GenerateRequest(p[1], 2, SamplingArgs(temperature=0.7, max_tokens=8, logprobs=3)),
            GenerateRequest(p[0], 1, SamplingArgs(temperature=1.0, top_k=2, max_tokens=8, logprobs=3)),
            GenerateRequest(p[0], 1, SamplingArgs(temperature=1.0, max_tokens=8))]
    results = engine.generate_batch(reqs)
    model = load_hf(model_dir)
    for r, completions in zip(reqs[:2], results[:2], strict=True):
        for c in completions:
            assert c.top_logprobs is not None and len(c.top_logprobs) == len(c.token_ids)
            ids = torch.tensor([list(r.prompt_token_ids) + c.token_ids])
            with torch.no_grad():
                logits = model(ids).logits[0, len(r.prompt_token_ids) - 1 : -1].float() / r.params.temperature
            if r.params.top_k > 0:
                kth = logits.topk(r.params.top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            kept = 3 if r.params.top_k < 0 else min(3, r.params.top_k)
            best = torch.log_softmax(logits, dim=-1).topk(kept, dim=-1)
            for pos, (top, token, lp) in enumerate(zip(c.top_logprobs, c.token_ids, c.logprobs, strict=True)):
                assert sorted(top) == sorted(best.indices[pos].tolist())
                for t, v in zip(best.indices[pos].tolist(), best.values[pos].tolist(), strict=True):
                    assert abs(top[t] - v) <= TOL
                if token in top:
                    assert abs(top[token] - lp) <= TOL
    assert all(c.top_logprobs is None for c in results[2])


def check_seeds(engine, model_dir: Path) -> None:
    """A seeded request's samples depend on its seed, not on what else is in the batch."""
    p = prompts(model_dir)
    seeded = GenerateRequest(p[1], 3, SamplingArgs(temperature=1.0, max_tokens=10, seed=11))
    others = [GenerateRequest(p[0], 2, SamplingArgs(temperature=1.0, max_tokens=10)),
              GenerateRequest(p[2], 1, SamplingArgs(temperature=1.0, max_tokens=10, seed=11))]
    alone = [c.token_ids for c in engine.generate_batch([seeded])[0]]
    batched = [c.token_ids for c in engine.generate_batch([*others, seeded])[2]]
    assert alone == batched
    assert len({tuple(t) for t in alone}) > 1, "the samples of one seeded request differ from each other"
    reseeded = GenerateRequest(p[1], 3, SamplingArgs(temperature=1.0, max_tokens=10, seed=12))
    assert [c.token_ids for c in engine.generate_batch([reseeded])[0]] != alone


def check_split_seeded_request(engine, model_dir: Path) -> None:
    """vLLM samples the i-th sample of a seeded request with seed + i: a request for 3 split into
    requests of at most 2 (`explorer.max_repeat_times_per_runner`) gives the same 3 samples."""
    p = prompts(model_dir)[1]
    params = SamplingArgs(temperature=1.0, max_tokens=10, seed=11)
    whole = [c.token_ids for c in engine.generate_batch([GenerateRequest(p, 3, params)])[0]]
    parts = engine.generate_batch([GenerateRequest(p, k, chunk) for k, chunk in split_samples(3, params, 2)])
    assert [c.token_ids for part in parts for c in part] == whole


def check_near_zero_temperature(engine, model_dir: Path) -> None:
    """Temperature 1e-6 is greedy decoding (vLLM's rule), n samples included: n equal greedy responses
    with the logprobs of the plain logits."""
    p = prompts(model_dir)
    reqs = [GenerateRequest(p[0], 3, SamplingArgs(temperature=1e-6, max_tokens=8))]
    completions = engine.generate_batch(reqs)[0]
    assert len(completions) == 3 and len({tuple(c.token_ids) for c in completions}) == 1
    greedy = [GenerateRequest(p[0], 1, SamplingArgs(temperature=0.0, max_tokens=8))]
    assert completions[0].token_ids == engine.generate_batch(greedy)[0][0].token_ids
    ref = forward_logprobs(load_hf(model_dir), p[0], completions[0].token_ids, temperature=0.0)
    assert float((torch.tensor(completions[0].logprobs) - ref).abs().max()) <= TOL


def check_refused_request(engine, model_dir: Path) -> None:
    """A request vLLM refuses in its own checks (an empty prompt) is a RequestRejected, the request's fault
    (the explorer fails only its task), and the engine goes on serving."""
    with pytest.raises(RequestRejected, match="prompt cannot be empty"):
        engine.generate_batch([GenerateRequest([], 1, SamplingArgs(max_tokens=4))])
    assert len(engine.generate_batch([GenerateRequest(prompts(model_dir)[0], 2, SamplingArgs(max_tokens=4))])[0]) == 2


def settings(model_dir: Path) -> EngineSettings:
    # min_response_tokens=0: a minimum length masks the end token at the first positions, which the
    # plain forward pass below does not (docs/explorer.md, "Logprobs").
    return EngineSettings(str(model_dir), max_model_len=256, seed=3, min_response_tokens=0, cpu_kvcache_space_gb=1)


def check_incomplete_weights_refused(engine, model_dir: Path, run_dir: Path) -> None:
    """A step directory without some of the model's tensors, or without any, is a clear error."""
    from safetensors.torch import load_file, save_file

    step_dir = publish_changed(run_dir, 2, model_dir, seed=2)
    (weights_file,) = step_dir.glob("*.safetensors")
    tensors = load_file(str(weights_file))
    dropped = "model.layers.0.mlp.down_proj.weight"
    del tensors[dropped]
    save_file(tensors, str(weights_file))
    with pytest.raises(UserError, match=r"do not fit the rollout model: missing .*down_proj"):
        engine.load_weights(step_dir)
    weights_file.unlink()
    with pytest.raises(UserError, match=r"holds no \*\.safetensors files"):
        engine.load_weights(step_dir)


def check_teacher_scoring(engine, model_dir: Path) -> None:
    """As a distillation teacher (`rfthpc.explorer.teacher`) the engine gives each response token the
    log-probability a forward pass of its weights gives it at temperature 1, whatever the response's tokens
    (sampled by another model, environment text): several experiences scored in one call."""
    p = prompts(model_dir)
    responses = [[5, 17, 33, 2, 90, 11], [260, 3], list(range(40, 80))]
    experiences = [Experience(prompt, response, [0.0] * len(response), [1] * len(response), 0.0)
                   for prompt, response in zip(p, responses, strict=True)]
    score_with_teacher(engine, experiences)
    model = load_hf(model_dir)
    for e in experiences:
        assert e.teacher_logprobs is not None and len(e.teacher_logprobs) == len(e.response_token_ids)
        ref = forward_logprobs(model, e.prompt_token_ids, e.response_token_ids, 1.0, -1)
        assert float((torch.tensor(e.teacher_logprobs) - ref).abs().max()) <= TOL


def check_engine(engine_type: str, model_dir: Path, run_dir: Path) -> None:
    given = settings(model_dir)
    if engine_type == "vllm":  # a config's engine_kwargs reach the engine (vLLM's default max_logprobs: 20)
        given = dataclasses.replace(given, engine_kwargs={"max_logprobs": 21})
    engine = make_engine(engine_type, given)
    try:
        if engine_type == "vllm":
            assert engine.llm.llm_engine.vllm_config.model_config.max_logprobs == 21
        reqs = requests(model_dir)
        assert max_logprob_error(engine, reqs, model_dir) <= TOL
        check_top_logprobs(engine, model_dir)
        check_seeds(engine, model_dir)
        check_near_zero_temperature(engine, model_dir)
        check_teacher_scoring(engine, model_dir)
        if engine_type == "vllm":
            check_refused_request(engine, model_dir)
            check_split_seeded_request(engine, model_dir)
        step_dir = publish_changed(run_dir, 1, model_dir, seed=1)
        engine.load_weights(step_dir)
        assert max_logprob_error(engine, reqs, step_dir) <= TOL
        # The old weights no longer explain the samples: the update really happened.
        assert max_logprob_error(engine, reqs[:1], model_dir) > 1e-3
        check_incomplete_weights_refused(engine, model_dir, run_dir)
    finally:
        engine.close()


def test_transformers_engine_logprobs_and_reload(tiny_model: Path, tmp_path: Path) -> None:
    check_engine("transformers", tiny_model, tmp_path)


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("model", ["tiny_model", "tiny_untied_model"])
def test_vllm_engine_logprobs_and_reload(model: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The tied case covers the CPU backend's packed lm_head, which a plain reload leaves stale."""
    check_engine("vllm", request.getfixturevalue(model), tmp_path)


def test_prompt_without_room_for_a_response_is_refused(tiny_model: Path) -> None:
    with pytest.raises(PromptTooLong, match="max_model_len=8"):
        check_prompt_fits(GenerateRequest(list(range(8)), 1, SamplingArgs()), 8)
    check_prompt_fits(GenerateRequest(list(range(7)), 1, SamplingArgs()), 8)


def test_missing_model_directory_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="model.model_path"):
        EngineSettings(str(tmp_path / "nowhere"))


def test_unknown_engine_type_is_a_config_error(tiny_model: Path) -> None:
    with pytest.raises(UserError, match="engine_type 'sglang'"):
        make_engine("sglang", EngineSettings(str(tiny_model)))
