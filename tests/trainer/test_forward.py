"""The trainer's forward pass (rfthpc/trainer/forward.py) against the plain computation: the model's
logits at every position, log_softmax over the whole vocabulary. The LM head applied in chunks to
the response positions' hidden states gives the same log-probabilities, entropies, sum_v pi_v^2 and
gradients, unsharded and on 2 FSDP2 ranks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rfthpc.algorithms import entropy_from_logits
from rfthpc.trainer import forward, packed_attention
from rfthpc.trainer.batching import MicroBatch, collate
from tests.trainer.conftest import ROOT, grouped_samples, trainer_env

CHUNK_POSITIONS = 5
"""Positions per chunk of the LM head in these tests: a micro-batch's 50-odd response tokens take
several chunks, the last one short."""


def forward_cases(vocab: int) -> dict[str, MicroBatch]:
    """The micro-batch layouts the forward pass takes, over the same samples."""
    samples = grouped_samples(vocab)
    every = list(range(len(samples)))
    cpu = torch.device("cpu")
    return {"padded": collate(samples, every, cpu), "shared": collate(samples, every, cpu, share_prompts=True),
            "packed": collate(samples, every, cpu, packed=True)}


def plain_stats(model: torch.nn.Module, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log pi, entropy, sum pi^2), each (b, R), from the model's logits at every position of the
    padded sequences (`mb` padded): the computation the chunked head replaces."""
    logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
    picked = torch.gather(logits, 1, mb.positions.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    picked = picked.float() / mb.temperature.view(-1, 1, 1)
    log_p = torch.log_softmax(picked, dim=-1)
    lp = log_p.gather(-1, mb.response_ids.unsqueeze(-1)).squeeze(-1)
    return lp, entropy_from_logits(picked), log_p.exp().pow(2).sum(-1)


def plain_results(model: torch.nn.Module, mb: MicroBatch) -> dict:
    """What `fsdp_forward_worker.py` records for one micro-batch, computed the plain way."""
    model.zero_grad(set_to_none=True)
    lp, entropy, sum_pi2 = plain_stats(model, mb)
    ((lp + 0.1 * entropy) * mb.response_mask).sum().backward()
    return {"lp": lp.detach(), "entropy": entropy.detach(), "grads": {n: p.grad for n, p in model.named_parameters()},
            "both": torch.stack([lp.detach(), sum_pi2.detach()], dim=-1)}


def response_tokens(mb: MicroBatch) -> torch.Tensor:
    """(b, R) bool: True at each response token (`mb.tokens`)."""
    valid = torch.zeros_like(mb.response_mask)
    valid[tuple(mb.tokens)] = True
    return valid


def assert_same(got: dict, want: dict, mb: MicroBatch) -> None:
    """Equal at every response token (to float32 rounding), gradients included."""
    valid = response_tokens(mb)
    torch.testing.assert_close(got["lp"][valid], want["lp"][valid], rtol=1e-5, atol=2e-6)
    torch.testing.assert_close(got["entropy"][valid], want["entropy"][valid], rtol=1e-5, atol=2e-6)
    torch.testing.assert_close(got["both"][valid], want["both"][valid], rtol=1e-5, atol=2e-6)
    assert set(got["grads"]) == set(want["grads"])
    for name, g in want["grads"].items():
        torch.testing.assert_close(got["grads"][name], g, rtol=1e-4, atol=1e-6, msg=name)


def _causal_lm(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()


@pytest.mark.parametrize("attention", ["sdpa", packed_attention.ATTENTION])
@pytest.mark.parametrize("layout", ["padded", "shared", "packed"])
def test_the_chunked_head_gives_the_plain_numbers(tiny_model: Path, layout: str, attention: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Log-probs, entropy (differentiable) and sum pi^2 of the chunked head, and the gradients of a
    loss on them, equal the full-logits computation on padded sequences (transformers' sdpa),
    whatever the layout (padded, shared prompts, padding-free) and attention (sdpa, or rfthpc's,
    which runs each sample of a packed row on its own); the head never sees more than a chunk of
    positions, and only response positions (50 of them, not 12 x 18 padded positions)."""
    model = _causal_lm(tiny_model)
    vocab = model.config.vocab_size
    monkeypatch.setattr(forward, "HEAD_CHUNK_LOGITS", CHUNK_POSITIONS * vocab)
    cases = forward_cases(vocab)
    mb = cases[layout]
    want = plain_results(model, cases["padded"])
    model.set_attn_implementation(attention)
    rows: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _out: rows.append(args[0].shape[0]))
    model.zero_grad(set_to_none=True)
    lp, entropy = forward.token_logprobs(model, mb, with_entropy=True, entropy_grad=True)
    ((lp + 0.1 * entropy) * mb.response_mask).sum().backward()
    got = {"lp": lp.detach(), "entropy": entropy.detach(), "grads": {n: p.grad for n, p in model.named_parameters()},
           "both": forward.token_logprobs_and_stats(model, mb, ("sum_pi_squared",))}
    hook.remove()
    assert_same(got, want, mb)
    n = mb.tokens.shape[1]
    # Forward, the backward's recomputation, then the no-grad pass: each over the response positions once.
    assert max(rows) == CHUNK_POSITIONS and sum(rows) == 3 * n, (rows, n)
    past_the_end = ~response_tokens(mb)
    assert past_the_end.any() and torch.all(lp[past_the_end] == 0) and torch.all(entropy[past_the_end] == 0)


def test_the_entropy_metric_has_no_gradient_and_a_placeholder_gives_zeros(tiny_model: Path) -> None:
    model = _causal_lm(tiny_model)
    mb = forward_cases(model.config.vocab_size)["padded"]
    lp, entropy = forward.token_logprobs(model, mb, with_entropy=True)
    assert lp.requires_grad and not entropy.requires_grad
    empty = collate([], [], torch.device("cpu"))
    lp0, _ = forward.token_logprobs(model, empty)
    assert lp0.requires_grad and torch.all(lp0 == 0)
    (lp0.sum()).backward()  # a rank with no sample still runs the backward


def test_a_model_without_a_plain_head_uses_its_own_logits(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model type outside PLAIN_DECODERS (its logits may be scaled or capped) is asked for its
    logits, the same statistics then taken in chunks over them."""
    model = _causal_lm(tiny_model)
    vocab = model.config.vocab_size
    monkeypatch.setattr(forward, "HEAD_CHUNK_LOGITS", CHUNK_POSITIONS * vocab)
    monkeypatch.setattr(forward, "PLAIN_DECODERS", frozenset())
    cases = forward_cases(vocab)
    for mb in cases.values():
        want = plain_results(model, cases["padded"])
        model.zero_grad(set_to_none=True)
        lp, entropy = forward.token_logprobs(model, mb, with_entropy=True, entropy_grad=True)
        ((lp + 0.1 * entropy) * mb.response_mask).sum().backward()
        got = {"lp": lp.detach(), "entropy": entropy.detach(),
               "grads": {n: p.grad for n, p in model.named_parameters()},
               "both": forward.token_logprobs_and_stats(model, mb, ("sum_pi_squared",))}
        assert_same(got, want, mb)


def test_the_trainers_models_pack_samples_where_attention_stays_per_sample(tiny_model: Path) -> None:
    """sdpa is replaced by rfthpc's per-sample attention, which makes a model take padding-free
    micro-batches; not where a sliding window lives in sdpa's mask, nor for an unknown model type."""
    model = _causal_lm(tiny_model)
    assert model.config._attn_implementation == "sdpa" and not forward.packs_samples(model)
    packed_attention.adopt(model)
    assert model.config._attn_implementation == packed_attention.ATTENTION and forward.packs_samples(model)
    windowed = _causal_lm(tiny_model)
    windowed.config.layer_types = ["sliding_attention"] * len(windowed.config.layer_types)
    packed_attention.adopt(windowed)
    assert windowed.config._attn_implementation == "sdpa"
    model.config.model_type = "gemma2"
    assert not forward.packs_samples(model)
    two_rows = torch.arange(4).repeat(2, 2)  # two rows, each of two samples
    q = torch.zeros(2, 1, 8, 4)
    with pytest.raises(ValueError, match="one packed row"):
        packed_attention.packed_sdpa_attention(model.model.layers[0].self_attn, q, q, q, None, position_ids=two_rows)


@pytest.mark.slow
def test_two_fsdp2_ranks_give_the_plain_numbers(tiny_model: Path, tmp_path: Path) -> None:
    """On 2 gloo ranks with FSDP2 (each decoder block and the root sharded, the LM head tied to the
    sharded embedding) the chunked head, run inside the root's forward, gives the numbers and whole
    gradients of the unsharded model's full logits, in every layout (the sharded model attends
    with rfthpc's per-sample attention)."""
    out = tmp_path / "results.pt"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            str(ROOT / "tests" / "trainer" / "fsdp_forward_worker.py"), str(tiny_model), str(out)]
    done = subprocess.run(argv, check=False, env=trainer_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = torch.load(out)
    model = _causal_lm(tiny_model)
    cases = forward_cases(model.config.vocab_size)
    assert sorted(results) == sorted(cases)
    want = plain_results(model, cases["padded"])
    for name, mb in cases.items():
        assert_same(results[name], want, mb)


def test_critic_values_do_not_depend_on_the_layout(tiny_model: Path) -> None:
    """A value model's outputs at the positions before each response token: the same padded, with
    shared prompts' micro-batch (which the critic runs as whole sequences) and packed."""
    from transformers import AutoModelForTokenClassification

    critic = AutoModelForTokenClassification.from_pretrained(tiny_model, num_labels=1, dtype=torch.float32).eval()
    cases = forward_cases(critic.config.vocab_size)
    padded = cases["padded"]
    out = critic(input_ids=padded.input_ids, attention_mask=padded.attention_mask).logits.squeeze(-1)
    want = torch.gather(out, 1, padded.positions)
    valid = response_tokens(padded)
    for mb in cases.values():
        torch.testing.assert_close(forward.token_values(critic, mb)[valid], want[valid], rtol=1e-5, atol=1e-6)
