"""Ulysses sequence parallelism (rfthpc/trainer/sequence_parallel.py): a packed row split over 2 gloo
ranks gives the log-probabilities, entropies, losses, metrics and gradients of the whole row on 1
rank, for rows of several samples, a row padded to an even length, rows where one rank predicts no
token, and an update over several micro-batches of a token budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.trainer.batching import collate
from rfthpc.trainer.samples import Sample
from rfthpc.trainer.sequence_parallel import SequenceGroup, split_row
from tests.trainer.conftest import ROOT, trainer_env
from tests.trainer.test_forward import _causal_lm, plain_results, response_tokens

CHUNK_POSITIONS = 5
"""Positions per chunk of the LM head: each rank's share of a row takes several chunks."""
TOKEN_BUDGET = 48
"""Tokens per micro-batch of the update: the batch's 130 tokens take several."""


@pytest.fixture(scope="module")
def heads4_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tied-embedding Qwen2 with 4 attention and 2 key/value heads: both split 2 ways."""
    from rfthpc.demos.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("demo_model"), "demo", seed=0)


def samples(vocab: int) -> list[Sample]:
    """Three groups of 4 responses (1 to 9 tokens, some masked) to prompts of 2, 6 and 9 tokens, T=0.7;
    then one response of 1 token to a prompt of 9."""
    rng = np.random.default_rng(5)
    out = []
    for g, p in enumerate((2, 6, 9)):
        prompt = rng.integers(3, vocab, size=p)
        for _ in range(4):
            r = int(rng.integers(1, 10))
            out.append(Sample(prompt, rng.integers(3, vocab, size=r), rng.random(r) > 0.2, group=g, temperature=0.7))
    out.append(Sample(rng.integers(3, vocab, size=9), rng.integers(3, vocab, size=1), np.ones(1, bool), group=3,
                      temperature=0.7))
    return out


def cases() -> dict[str, list[int]]:
    """Packed micro-batches (sample indices into `samples`) the forward pass is checked on."""
    return {
        "all": list(range(12)),  # 12 samples of 3 prompts in one row
        "odd": [0, 5, 8],  # a row of odd length: padded by a padding sample
        "late": [12],  # its one response token is predicted in the second half: rank 0 predicts none
        "placeholder": [],  # a replica with no sample: rank 1 predicts none
    }


def test_a_row_splits_into_equal_slices_and_each_token_is_computed_once() -> None:
    """The row is padded to a multiple of the group by a sample of its own (position ids from 0);
    the slices cover it and each response token is predicted in exactly one of them."""
    vocab = 512
    batch = samples(vocab)
    lengths = {name: sum(batch[i].length for i in idx) for name, idx in cases().items()}
    assert lengths["odd"] % 2 == 1 and lengths["all"] > TOKEN_BUDGET
    cpu = torch.device("cpu")
    for name, idx in cases().items():
        whole = collate(batch, idx, cpu, packed=True)
        parts = [collate(batch, idx, cpu, packed=True, sequence=SequenceGroup(None, 2, r, 0, 1)) for r in range(2)]
        length = whole.input_ids.shape[1]
        padded = length + length % 2
        assert [(p.sequence.begin, p.sequence.end) for p in parts] == [(0, padded // 2), (padded // 2, padded)]
        for p in parts:
            assert torch.equal(p.input_ids[:, :length], whole.input_ids)
            assert torch.equal(p.position_ids[0, length:], torch.arange(padded - length))
            assert torch.equal(p.sequence.position_ids, p.position_ids)
            assert torch.equal(p.model_inputs()["input_ids"], p.input_ids[:, p.sequence.begin:p.sequence.end])
            rows, cols = p.sequence.tokens
            assert torch.equal(whole.positions[rows, cols] - p.sequence.begin, p.sequence.positions)
        computed = torch.cat([p.computed_tokens for p in parts], dim=1)
        assert sorted(map(tuple, computed.T.tolist())) == sorted(map(tuple, whole.tokens.T.tolist())), name
        counts = [p.sequence.tokens.shape[1] for p in parts]
        assert {"late": counts[0] == 0, "placeholder": counts[1] == 0}.get(name, min(counts) > 0), (name, counts)
    pad, begin, mine = split_row(7, np.array([0, 3, 4, 6]), 4, 1)  # 8 tokens, rank 1 holds [2, 4)
    assert (pad, begin, mine.tolist()) == (1, 2, [1])


def test_a_model_that_does_not_attend_across_the_group_refuses_a_slice(tiny_model: Path) -> None:
    """rfthpc's per-sample attention would take a slice of a row for the whole row: it refuses one."""
    from rfthpc.trainer import forward, packed_attention

    model = _causal_lm(tiny_model)
    packed_attention.adopt(model)
    mb = collate(samples(model.config.vocab_size), [0, 5], torch.device("cpu"), packed=True,
                 sequence=SequenceGroup(None, 2, 0, 0, 1))
    with pytest.raises(ValueError, match="got a slice of a row split over a sequence-parallel group"):
        forward.token_logprobs(model, mb)


def assert_same(got: dict, want: dict, mb) -> None:
    """Equal at every response token and in every gradient, to float32 rounding (gradients of up to
    ~10 summed over 120 tokens in other orders: some 1e-6 apart)."""
    valid = response_tokens(mb)
    for key in ("lp", "entropy", "both"):
        torch.testing.assert_close(got[key][valid], want[key][valid], rtol=1e-5, atol=2e-6, msg=key)
    assert set(got["grads"]) == set(want["grads"])
    for name, g in want["grads"].items():
        torch.testing.assert_close(got["grads"][name], g, rtol=1e-4, atol=1e-5, msg=name)


def _worker(model: Path, out: Path, nproc: int, sp: int) -> dict:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            str(ROOT / "tests" / "trainer" / "sequence_parallel_worker.py"), str(model), str(out), str(sp)]
    done = subprocess.run(argv, check=False, env=trainer_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return torch.load(out, weights_only=False)


@pytest.mark.slow
def test_two_sequence_parallel_ranks_give_the_numbers_of_one(heads4_model: Path, tmp_path: Path) -> None:
    """SP 2 on 2 FSDP2 ranks (one data-parallel replica) against SP 1 on 1 rank (the policy, under
    gradient checkpointing too, and a critic), and the forward pass against the plain full-logits
    computation of an unsharded model."""
    one = _worker(heads4_model, tmp_path / "sp1.pt", 1, 1)
    two = _worker(heads4_model, tmp_path / "sp2.pt", 2, 2)
    model = _causal_lm(heads4_model)
    vocab = model.config.vocab_size
    cpu = torch.device("cpu")
    for name, idx in cases().items():
        mb = collate(samples(vocab), idx, cpu, packed=True)
        assert_same(two["forward"][name], one["forward"][name], mb)
        if idx:
            assert_same(two["forward"][name], plain_results(model, collate(samples(vocab), idx, cpu)), mb)
    u1, u2 = one["update"], two["update"]
    assert u1["n_micro"] == u2["n_micro"] > 1
    assert u1["metrics"].keys() == u2["metrics"].keys() == {"loss", "entropy"}
    for key, value in u1["metrics"].items():
        assert u2["metrics"][key] == pytest.approx(value, rel=1e-5), key
    assert u2["grad_norm"] == pytest.approx(u1["grad_norm"], rel=1e-5)
    for name, step in u1["step"].items():
        torch.testing.assert_close(u2["step"][name], step, rtol=1e-4, atol=1e-6, msg=name)
    for a, b in zip(u2["logprobs"], u1["logprobs"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)
    for a, b in zip(two["values"], one["values"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)
    valid = response_tokens(collate(samples(vocab), cases()["all"], cpu, packed=True))
    for part, key in (("checkpointed", "lp"), ("critic", "values")):
        torch.testing.assert_close(two[part][key][valid], one[part][key][valid], rtol=1e-5, atol=2e-6, msg=part)
        for name, g in one[part]["grads"].items():
            torch.testing.assert_close(two[part]["grads"][name], g, rtol=1e-4, atol=1e-5, msg=f"{part} {name}")


@pytest.mark.slow
def test_a_trainer_with_two_sequence_parallel_ranks_trains_as_one_rank(heads4_model: Path, tmp_path: Path) -> None:
    """`trainer.ulysses_sequence_parallel_size: 2` on 2 ranks against 1 rank, the whole trainer: a KL
    loss against the reference model (split too), two updates per step (log-probs recomputed before
    them), micro-batches of a token budget (per GPU: a group's micro-batch holds twice as many)."""
    from safetensors.torch import load_file

    from rfthpc.rundir.metrics import read_metrics
    from rfthpc.weights import published as weights
    from tests.trainer.conftest import make_run, rl_config, run_trainer_inprocess, start_trainer, write_groups

    changes = {"buffer.total_steps": 2, "trainer.ppo_mini_batch_size": 1, "algorithm.kl_loss_fn": "k2",
               "algorithm.kl_loss_fn_args": {"kl_coef": 0.1}, "trainer.max_token_len_per_gpu": 24,
               "trainer.save_hf_checkpoint": "never",
               # Adam with eps 1 moves each weight by about lr x its gradient: no rounding-sized
               # gradient is blown up to a step of lr, and the weights compare to the gradients' rounding.
               "algorithm.optimizer.lr": 0.1, "algorithm.optimizer.eps": 1.0}
    one = make_run(tmp_path / "one", rl_config(heads4_model, **changes))
    two = make_run(tmp_path / "two", rl_config(heads4_model, **changes, **{"trainer.ulysses_sequence_parallel_size": 2}))
    for run in (one, two):
        write_groups(run, 4)
    proc = start_trainer(two, nproc=2)
    assert run_trainer_inprocess(one) == 0
    assert proc.wait(timeout=600) == 0, (two.log / "trainer.log").read_text()[-3000:]
    a = load_file(str(weights.step_dir(one.root, 2) / "model.safetensors"))
    b = load_file(str(weights.step_dir(two.root, 2) / "model.safetensors"))
    base = load_file(str(heads4_model / "model.safetensors"))
    moved = max((a[k] - base[k]).abs().max().item() for k in a)
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    assert moved > 1e-3 and diff < 1e-5, (moved, diff)
    ra = {r["step"]: r for r in read_metrics(one.monitor / "trainer.jsonl")}
    rb = {r["step"]: r for r in read_metrics(two.monitor / "trainer.jsonl")}
    assert sorted(ra) == sorted(rb) == [1, 2]
    for step in ra:
        for name in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl"):
            assert rb[step][name] == pytest.approx(ra[step][name], rel=1e-4, abs=1e-6), (step, name)
