"""What the trainer hands an advantage estimator beyond rewards and masks: the reward's components
(gdpo), the policy's sum_v pi_v^2 or entropy from its forward pass (optimal_token_baseline, clipb) and
the behaviour log-probabilities; and what it does with the responses or tokens an estimator leaves out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.config import Config
from rfthpc.config.algorithm import AlgorithmConfig
from rfthpc.config.derive import finalize
from rfthpc.config.settings import AlgorithmSettings
from rfthpc.rundir.metrics import read_metrics
from rfthpc.store import ChunkWriter, Group
from rfthpc.store import StoredExperience as Experience
from rfthpc.store.schema import SUBGROUP
from rfthpc.trainer.batching import collate
from rfthpc.trainer.losses import Algorithm
from rfthpc.trainer.rl_batch import build_step_tensors
from rfthpc.trainer.samples import Sample, advantage_groups, samples_from_groups
from tests.trainer.conftest import make_run, random_group, rl_config, run_trainer_inprocess


def _algorithm(advantage_fn: str, **args) -> Algorithm:
    cfg = Config(algorithm=AlgorithmConfig(algorithm_type="grpo", advantage_fn=advantage_fn, advantage_fn_args=args))
    return Algorithm.from_settings(AlgorithmSettings.of(finalize(cfg).algorithm))


def _sample(group: int, reward: float, components: dict[str, float] | None, n: int = 2,
            behaviour: float = 0.0) -> Sample:
    return Sample(prompt_ids=np.array([1]), response_ids=np.arange(2, 2 + n), loss_mask=np.ones(n, dtype=bool),
                  reward=reward, behaviour_logprobs=np.full(n, behaviour, dtype=np.float32), group=group,
                  reward_components=components)


def test_samples_carry_the_stored_reward_components() -> None:
    exps = [Experience(prompt_ids=[1], response_ids=[2, 3], logprobs=[-1.0, -1.0], loss_mask=[1, 1], reward=1.5,
                       info={"reward_components": {"accuracy": 1, "format": 0.5}}),
            Experience(prompt_ids=[1], response_ids=[2], logprobs=[-1.0], loss_mask=[1], reward=0.0)]
    group = Group(task_id="t", experiences=exps, policy_version=0, explorer="ex", rank=0)
    samples = samples_from_groups([group], vocab_size=10, max_length=None)
    assert samples[0].reward_components == {"accuracy": 1.0, "format": 0.5}
    assert samples[1].reward_components is None


def test_gdpo_reads_the_components_and_counts_a_missing_one_as_zero() -> None:
    samples = [_sample(0, 1.5, {"accuracy": 1.0, "format": 0.5}), _sample(0, 0.5, {"format": 0.5}),
               _sample(1, 1.0, {"accuracy": 1.0}), _sample(1, 0.2, {"accuracy": 0.0, "format": 0.2})]
    t, _ = build_step_tensors(samples, _algorithm("gdpo"))
    # accuracy 1, 0 | 1, 0 (the response without it counts 0) and format 0.5, 0.5 | 0, 0.2: GRPO per component,
    # group 0's format has no contrast
    a = 0.5 / (np.sqrt(0.5) + 1e-6)
    f = 0.1 / (np.sqrt(0.02) + 1e-6)
    raw = torch.tensor([a, -a, a - f, -a + f], dtype=torch.float64)
    expected = (raw - raw.mean()) / torch.sqrt(raw.repeat_interleave(2).var() + 1e-8)  # whitened over 8 tokens
    torch.testing.assert_close(t.advantages[:, 0].double(), expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(t.advantages[:, 0], t.advantages[:, 1])
    # grpo on the summed reward sees other contrasts: gdpo is not grpo here
    grpo, _ = build_step_tensors(samples, _algorithm("grpo"))
    assert not torch.allclose(grpo.advantages, t.advantages)


def test_other_estimators_get_no_components() -> None:
    from rfthpc import algorithms as algos

    seen = {}

    def spy(inputs, **_):
        seen["components"] = inputs.reward_components
        return algos.ADVANTAGE_FNS.get("grpo")(inputs)

    alg = _algorithm("grpo")
    alg.advantage = spy
    build_step_tensors([_sample(0, 1.0, {"a": 1.0}), _sample(0, 0.0, {"a": 0.0})], alg)
    assert seen["components"] is None


def test_responses_grpo_leaves_out_leave_the_loss_mask() -> None:
    """std_threshold: group 1 (equal rewards) is not trained; its rows leave the step's mask."""
    samples = [_sample(0, 1.0, None), _sample(0, 0.0, None), _sample(1, 1.0, None), _sample(1, 1.0, None, n=1)]
    t, metrics = build_step_tensors(samples, _algorithm("grpo", std_threshold=1e-4))
    assert t.mask.tolist() == [[True, True], [True, True], [False, False], [False, False]]
    assert metrics["critic/dropped_responses"] == 2.0
    everyone, metrics = build_step_tensors(samples, _algorithm("grpo"))
    assert everyone.mask.tolist() == [[True, True]] * 3 + [[True, False]]
    assert metrics["critic/dropped_responses"] == 0.0


def test_tokens_clipb_leaves_out_leave_the_loss_mask() -> None:
    """clipb reads the explorer's log-probabilities and the forward pass's entropy: with log mu = -1 the
    signal is S = (H - 1) / e, S * e = 0, 0, -3 | 0, -3, 1 (mean -5/6, std 1.572): both -3 tokens fall below
    mean - 1 * std, and the negative response's leaves the step; the positive one's stays."""
    samples = [_sample(0, 1.0, None, n=3, behaviour=-1.0), _sample(0, 0.0, None, n=3, behaviour=-1.0)]
    entropy = [np.array([1.0, 1.0, -2.0], dtype=np.float32), np.array([1.0, -2.0, 2.0], dtype=np.float32)]
    t, metrics = build_step_tensors(samples, _algorithm("clipb", mu=1.0), old=[np.zeros(3, np.float32)] * 2,
                                    forward_stats={"entropy": entropy})
    assert t.mask.tolist() == [[True, True, True], [True, False, True]]
    assert metrics["critic/dropped_token_fraction"] == pytest.approx(1 / 6)
    assert t.advantages[0, 0] > 0 > t.advantages[1, 0]


def test_a_groups_subgroups_are_compared_apart() -> None:
    """A task's policy responses and its judge replies (info subgroup, math_trainable_ruler_workflow) are two
    GRPO groups: each is normalised on its own, as Trinity-RFT's two task ids are."""
    def experience(reward: float, subgroup: str | None = None) -> Experience:
        return Experience(prompt_ids=[1], response_ids=[2, 3], logprobs=[-1.0, -1.0], loss_mask=[1, 1], reward=reward,
                          info={SUBGROUP: subgroup} if subgroup else {})

    tasks = [Group(task_id=t, experiences=[experience(1.0), experience(0.0), experience(0.9, "judge"),
                                           experience(0.5, "judge")], policy_version=0, explorer="ex", rank=0)
             for t in ("a", "b")]
    samples = samples_from_groups(tasks, vocab_size=10, max_length=None)
    assert [s.group for s in samples] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert advantage_groups(samples) == [0, 0, 1, 1, 2, 2, 3, 3]
    t, _ = build_step_tensors(samples, _algorithm("grpo"))
    a = 0.5 / (np.sqrt(0.5) + 1e-6)
    j = 0.2 / (np.sqrt(0.08) + 1e-6)
    torch.testing.assert_close(t.advantages[:, 0].double(), torch.tensor([a, -a, j, -j] * 2, dtype=torch.float64),
                               rtol=1e-5, atol=1e-6)


def test_a_run_trains_without_the_groups_grpo_leaves_out(tmp_path: Path, tiny_model: Path) -> None:
    """Every other group has equal rewards; with std_threshold the trainer leaves them out of each step."""
    cfg = rl_config(tiny_model, **{"algorithm.advantage_fn_args": {"std_threshold": 1e-4}, "buffer.total_steps": 2,
                                   "trainer.save_hf_checkpoint": "never"})
    run = make_run(tmp_path / "run", cfg)
    rng = np.random.default_rng(0)
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=3600) as w:
        for i in range(4):
            group = random_group(rng, f"t{i}", 4, 384)
            for k, e in enumerate(group.experiences):
                e.reward = 1.0 if i % 2 else float(k % 2)  # t1, t3: no contrast
            w.add(group)
    assert run_trainer_inprocess(run) == 0
    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}
    assert [records[s]["critic/dropped_responses"] for s in (1, 2)] == [4.0, 4.0]
    assert all(np.isfinite(records[s]["actor/pg_loss"]) for s in (1, 2))


@pytest.mark.parametrize("share", [False, True])
def test_the_forward_pass_gives_log_probs_the_sum_of_squared_probabilities_and_the_entropy(tiny_model: Path,
                                                                                           share: bool) -> None:
    from transformers import AutoModelForCausalLM

    from rfthpc.trainer.forward import token_logprobs, token_logprobs_and_stats

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    rng = np.random.default_rng(5)
    samples = [Sample(np.array([4, 9, 17]), rng.integers(3, 300, size=n), np.ones(n, bool), temperature=0.7)
               for n in (1, 4, 6)]
    mb = collate(samples, [0, 1, 2], torch.device("cpu"), share_prompts=share)
    both = token_logprobs_and_stats(model, mb, ("sum_pi_squared", "entropy"))
    with torch.no_grad():
        lp, entropy = token_logprobs(model, mb, with_entropy=True)
    mask = mb.response_mask
    torch.testing.assert_close(both[..., 0][mask], lp[mask])
    torch.testing.assert_close(both[..., 2][mask], entropy[mask])
    for row, s in enumerate(samples):
        ids = torch.from_numpy(np.concatenate([s.prompt_ids, s.response_ids])).unsqueeze(0)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(s.prompt_ids) - 1:-1].float() / 0.7
        expected = torch.softmax(logits, dim=-1).pow(2).sum(-1)
        torch.testing.assert_close(both[row, :len(s.response_ids), 1], expected, rtol=1e-5, atol=1e-6)
        assert torch.all((expected > 0) & (expected <= 1))


def _write_groups_with_components(run, n: int, repeat: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=3600) as w:
        for i in range(n):
            group = random_group(rng, f"t{i}", repeat, 384)
            for e in group.experiences:
                fmt = float(rng.integers(0, 2)) / 2
                e.info = {"reward_components": {"accuracy": e.reward, "format": fmt}}
                e.reward += fmt
            w.add(group)


@pytest.mark.parametrize(("advantage_fn", "mini_batch"), [("optimal_token_baseline", 1),
                                                          ("optimal_token_baseline", 2), ("gdpo", 2),
                                                          ("clipb", 2)])
def test_a_run_trains_with_the_estimator(tmp_path: Path, tiny_model: Path, advantage_fn: str, mini_batch: int) -> None:
    """Two trainer steps; with one mini-batch of two groups the loss needs no recomputed log-probabilities,
    with two it does and reuses the pass that gave sum_v pi_v^2 (or the entropy)."""
    cfg = rl_config(tiny_model, **{"algorithm.advantage_fn": advantage_fn, "buffer.total_steps": 2,
                                   "trainer.ppo_mini_batch_size": mini_batch, "trainer.save_hf_checkpoint": "never"})
    run = make_run(tmp_path / "run", cfg)
    _write_groups_with_components(run, 4, repeat=4)
    assert run_trainer_inprocess(run) == 0
    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}
    assert sorted(records) == [1, 2]
    assert all(np.isfinite(records[2][k]) for k in ("actor/pg_loss", "critic/advantages/mean", "critic/advantages/max"))
    assert records[2]["critic/advantages/max"] > 0
    if advantage_fn == "clipb":
        assert 0 <= records[2]["critic/dropped_token_fraction"] < 1


def test_lite_ppos_max_len_mask_takes_responses_cut_at_the_limit_out_of_the_loss() -> None:
    """The trainer tells lite_ppo which responses reached model.max_response_tokens (ROLL's max_len_mask)."""
    samples = [_sample(0, 1.0, None, n=3), _sample(0, 0.0, None, n=2), _sample(1, 1.0, None, n=3),
               _sample(1, 0.0, None, n=1)]
    t, metrics = build_step_tensors(samples, _algorithm("lite_ppo", max_len_mask=True), max_response_tokens=3)
    assert t.mask.any(dim=-1).tolist() == [False, True, False, True]
    assert metrics["critic/dropped_responses"] == 2
    kept, _ = build_step_tensors(samples, _algorithm("lite_ppo"), max_response_tokens=3)
    assert kept.mask.any(dim=-1).all()
