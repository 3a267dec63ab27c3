"""The trainer's small parts, each on its own: batching plans, the LR schedule, sample checks,
SFT tokenisation, stage positions, signals, the algorithm binding."""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.config import resolve_stages
from rfthpc.config.algorithm import AlgorithmConfig
from rfthpc.config.buffer import ExperienceBufferConfig
from rfthpc.config.derive import finalize
from rfthpc.config.load import config_from_dict
from rfthpc.config.model import ModelConfig
from rfthpc.config.schema import Config, StageConfig
from rfthpc.config.settings import AlgorithmSettings, TrainerStageSettings, trainer_settings
from rfthpc.errors import ConfigError, UserError
from rfthpc.signals import StopRequest
from rfthpc.store import Group
from rfthpc.store import StoredExperience as Experience
from rfthpc.trainer.batching import (
    balanced_split,
    collate,
    mini_batches,
    pack_token_bins,
    pad_rows,
    plan_micro_batches,
)
from rfthpc.trainer.checkpoint_meta import CheckpointMeta
from rfthpc.trainer.losses import Algorithm
from rfthpc.trainer.optim import LRSchedule
from rfthpc.trainer.samples import Sample, check_group, samples_from_groups
from rfthpc.trainer.stages import Position, resume_position
from tests.trainer.conftest import grouped_samples


def _sample(p: int, r: int, group: int = 0) -> Sample:
    return Sample(np.arange(1, p + 1), np.arange(1, r + 1), np.ones(r, bool), group=group)


# ---- batching --------------------------------------------------------------------------------

def test_balanced_split_is_deterministic_and_balanced() -> None:
    parts = balanced_split([10, 1, 9, 2, 8, 3], 2)
    # 10 -> p0, 9 -> p1, 8 -> p1 (17), 3 -> p0 (13), 2 -> p0 (15), 1 -> p0 (16): loads 16 and 17.
    assert parts == [[0, 1, 3, 5], [2, 4]]
    assert balanced_split([5, 5], 3) == [[0], [1], []]


def test_token_bins_count_padding() -> None:
    # Longest first; a bin's padded size is its sample count x its first (longest) sample.
    assert pack_token_bins([6, 5, 4, 3, 2], 10) == [[0], [1, 2], [3, 4]]
    assert pack_token_bins([], 10) == []
    assert pack_token_bins([12], 10) == [[0]]  # an over-long sample still gets its own micro-batch


def _padded(samples: list[Sample], mb: list[int]) -> int:
    return len(mb) * max((samples[i].length for i in mb), default=0)


def test_every_rank_runs_the_same_number_of_micro_batches() -> None:
    samples = [_sample(4, 20)] + [_sample(2, 2) for _ in range(5)]
    plan = plan_micro_batches(samples, list(range(6)), 3, token_budget=24, micro_batch_size=1)
    assert {len(m) for m in plan.micro} == {plan.n_micro}
    flat = sorted(i for rank in plan.micro for mb in rank for i in mb)
    assert flat == list(range(6))  # each sample exactly once
    fixed = plan_micro_batches(samples, list(range(6)), 2, token_budget=None, micro_batch_size=2)
    assert fixed.n_micro == 2 and all(len(mb) <= 2 for rank in fixed.micro for mb in rank)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_micro_batches_keep_their_bounds(world_size: int) -> None:
    """A token budget bounds the padded size of every micro-batch, and a fixed size its sample count,
    whatever the mix of lengths (one long sample and many short ones pad the most)."""
    rng = np.random.default_rng(0)
    samples = [_sample(int(p), int(r)) for p, r in rng.integers(1, 30, size=(40, 2))] + [_sample(40, 20)]
    indices = list(range(len(samples)))
    for budget in (64, 100, 300):
        plan = plan_micro_batches(samples, indices, world_size, token_budget=budget, micro_batch_size=1)
        assert sorted(i for rank in plan.micro for mb in rank for i in mb) == indices
        assert {len(m) for m in plan.micro} == {plan.n_micro}
        assert all(_padded(samples, mb) <= budget for rank in plan.micro for mb in rank if len(mb) > 1)
    for size in (1, 3, 7):
        plan = plan_micro_batches(samples, indices, world_size, token_budget=None, micro_batch_size=size)
        assert sorted(i for rank in plan.micro for mb in rank for i in mb) == indices
        assert all(len(mb) <= size for rank in plan.micro for mb in rank)
        assert plan.n_micro == -(-max(len(s) for s in balanced_split([1] * len(samples), world_size)) // size)


def test_mini_batches_keep_groups_whole() -> None:
    samples = [_sample(2, 2, group=g) for g in (0, 0, 1, 1, 2, 2)]
    assert mini_batches(samples, 2) == [[0, 1, 2, 3], [4, 5]]
    assert mini_batches(samples, None) == [list(range(6))]
    assert mini_batches(samples, 3) == [list(range(6))]


def test_padding_free_token_bins_count_real_tokens() -> None:
    # Sums, not samples x the longest: 6 + 4 and 5 + 3 + 2 fit 10 (padded, that takes three bins).
    assert pack_token_bins([6, 5, 4, 3, 2], 10, padded=False) == [[0, 2], [1, 3, 4]]
    assert pack_token_bins([12, 1], 10, padded=False) == [[0], [1]]


def test_collate_packs_samples_into_one_row() -> None:
    s = [_sample(3, 2), Sample(np.array([7]), np.array([8, 9, 10]), np.array([1, 0, 1], bool))]
    mb = collate(s, [0, 1], torch.device("cpu"), packed=True)
    assert mb.input_ids.tolist() == [[1, 2, 3, 1, 2, 7, 8, 9, 10]] and mb.attention_mask is None
    # Positions restart at each sample: transformers reads the restarts as sample boundaries.
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3]]
    # The output at offset + P - 1 + j predicts response token j (clamped past the end).
    assert mb.positions.tolist() == [[2, 3, 4], [5, 6, 7]]
    assert mb.tokens.tolist() == [[0, 0, 1, 1, 1], [0, 1, 0, 1, 2]]
    assert mb.response_mask.tolist() == [[True, True, False], [True, False, True]]
    assert set(mb.model_inputs()) == {"input_ids", "position_ids"}
    placeholder = collate(s, [], torch.device("cpu"), packed=True)
    assert placeholder.is_padding and placeholder.position_ids.tolist() == [[0]]


def test_padding_free_plans_take_the_layout_that_computes_fewer_tokens() -> None:
    """Padding-free micro-batches pack real tokens; with shared prompts asked for too, each plan takes
    the layout that computes fewer tokens."""
    def group(g: int, prompt: int, responses: list[int]) -> list[Sample]:
        return [Sample(np.arange(prompt) + 100 * g, np.arange(1, r + 1), np.ones(r, bool), group=g) for r in responses]

    long_prompts = group(0, 20, [1, 2, 3, 4]) + group(1, 20, [4, 4, 4, 4])
    every = list(range(8))
    shared = plan_micro_batches(long_prompts, every, 1, token_budget=200, micro_batch_size=1, share_prompts=True,
                                padding_free=True)
    # Shared: 2 x 20 prompt tokens + 8 x 4 response tokens (72), packed: 8 x 20 + 26 (186).
    assert shared.share_prompts and not shared.padding_free
    long_responses = group(0, 2, [30, 1, 1, 1])
    packed = plan_micro_batches(long_responses, [0, 1, 2, 3], 1, token_budget=200, micro_batch_size=1,
                                share_prompts=True, padding_free=True)
    # Shared: 2 + 4 x 30 (122), packed: 4 x 2 + 33 (41).
    assert packed.padding_free and not packed.share_prompts and packed.micro == [[[0, 1, 2, 3]]]
    # The budget counts real tokens: 32 + 3 x 3 = 41 fit 45, padded (4 x 32) they would not.
    tight = plan_micro_batches(long_responses, [0, 1, 2, 3], 1, token_budget=45, micro_batch_size=1,
                               padding_free=True)
    assert tight.padding_free and tight.micro == [[[0, 1, 2, 3]]]
    assert plan_micro_batches(long_responses, [0, 1, 2, 3], 1, token_budget=45, micro_batch_size=1).n_micro == 2
    mb = next(tight.micro_batches(long_responses, 0, torch.device("cpu")))
    assert mb.input_ids.shape == (1, 41)


def test_collate_aligns_response_positions() -> None:
    s = [_sample(3, 2), Sample(np.array([7]), np.array([8, 9, 10]), np.array([1, 0, 1], bool))]
    mb = collate(s, [0, 1], torch.device("cpu"))
    assert mb.input_ids.tolist() == [[1, 2, 3, 1, 2], [7, 8, 9, 10, 0]]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    # Logits at position P-1+j predict response token j.
    assert mb.positions.tolist() == [[2, 3, 4], [0, 1, 2]]
    assert mb.response_mask.tolist() == [[True, True, False], [True, False, True]]
    empty = collate(s, [], torch.device("cpu"))
    assert empty.is_padding and empty.input_ids.shape == (1, 1)
    assert pad_rows([np.array([1.0]), None], 2).tolist() == [[1.0, 0.0], [0.0, 0.0]]


def test_collate_lays_out_each_distinct_prompt_once() -> None:
    s = [_sample(3, 2), _sample(3, 1), Sample(np.array([7]), np.array([8, 9, 10]), np.ones(3, bool))]
    mb = collate(s, [0, 1, 2], torch.device("cpu"), share_prompts=True)
    sh = mb.shared
    assert sh is not None
    # Distinct prompts left-padded, so that each ends where its responses start.
    assert sh.prompt_ids.tolist() == [[1, 2, 3], [0, 0, 7]] and sh.owner.tolist() == [0, 0, 1]
    assert sh.prompt_positions.tolist() == [[0, 1, 2], [0, 0, 0]]
    assert sh.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    assert sh.response_positions.tolist() == [[3, 4, 5], [3, 4, 5], [1, 2, 3]]
    assert collate(s, [0, 1], torch.device("cpu")).shared is None  # not asked
    placeholder = collate(s, [], torch.device("cpu"), share_prompts=True)
    assert placeholder.is_padding and placeholder.shared is not None  # it runs the passes the others run
    # The plan shares prompts when some repeat among its samples, then in every micro-batch of every rank.
    plan = plan_micro_batches(s, [0, 1, 2], 2, token_budget=None, micro_batch_size=1, share_prompts=True)
    assert plan.share_prompts and plan.n_micro == 2
    assert all(mb.shared is not None for r in (0, 1) for mb in plan.micro_batches(s, r, torch.device("cpu")))
    assert not plan_micro_batches(s, [0, 2], 1, token_budget=None, micro_batch_size=4, share_prompts=True).share_prompts


@pytest.mark.parametrize("checkpointing", [False, True])
def test_shared_prompt_forward_gives_the_same_logprobs_and_gradients(tiny_model: Path, checkpointing: bool) -> None:
    """Each prompt run once, its responses on its keys and values: the log-probabilities, entropies
    and gradients of running every whole sequence (with gradient checkpointing, which keeps no keys
    and values, the whole sequences run)."""
    from transformers import AutoModelForCausalLM

    from rfthpc.trainer.forward import token_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    samples = grouped_samples(model.config.vocab_size)
    results = []
    for share in (False, True):
        mb = collate(samples, list(range(len(samples))), torch.device("cpu"), share_prompts=share)
        assert (mb.shared is not None) == share
        model.zero_grad()
        lp, entropy = token_logprobs(model, mb, with_entropy=True, entropy_grad=True)
        ((lp + 0.1 * entropy) * mb.response_mask).sum().backward()
        results.append((lp.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (lp_a, ent_a, grad_a), (lp_b, ent_b, grad_b) = results
    mask = mb.response_mask
    assert torch.allclose(lp_a[mask], lp_b[mask], atol=1e-5) and torch.allclose(ent_a[mask], ent_b[mask], atol=1e-5)
    for name, g in grad_a.items():
        assert torch.allclose(g, grad_b[name], rtol=1e-4, atol=1e-6), name


# ---- schedule --------------------------------------------------------------------------------

def test_lr_schedule_warmup_constant_and_cosine() -> None:
    const = LRSchedule(1.0, total_steps=10, warmup_steps=4)
    assert [const(k) for k in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    cos = LRSchedule(1.0, total_steps=6, warmup_ratio=1 / 3, style="cosine", min_lr_ratio=0.5)
    assert cos.warmup == 2
    # After warm-up: 0.5 + 0.5 * (1 + cos(pi * (k - 2) / 4)) / 2
    expected = [0.5, 1.0] + [0.5 + 0.25 * (1 + math.cos(math.pi * (k - 2) / 4)) for k in range(2, 6)]
    assert [cos(k) for k in range(6)] == pytest.approx(expected)
    with pytest.raises(ConfigError, match="total_steps"):
        LRSchedule(1.0, total_steps=None, style="cosine")
    with pytest.raises(ConfigError, match="lr_warmup_steps_ratio"):
        LRSchedule(1.0, total_steps=None, warmup_ratio=0.1)


def test_lr_schedule_linear_decays_to_the_floor_like_hugging_faces() -> None:
    lin = LRSchedule(1.0, total_steps=6, warmup_steps=2, style="linear")
    # Hugging Face's get_linear_schedule_with_warmup: (k + 1) / W, then (T - k) / (T - W).
    assert [lin(k) for k in range(6)] == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])
    floor = LRSchedule(1.0, total_steps=4, style="linear", min_lr_ratio=0.2)
    assert [floor(k) for k in range(4)] == pytest.approx([1.0, 0.8, 0.6, 0.4])
    with pytest.raises(ConfigError, match="linear decays over buffer.total_steps"):
        LRSchedule(1.0, total_steps=None, style="linear")


def test_lr_schedule_follows_the_scheduler_under_its_older_name() -> None:
    raw = {"model": {"model_path": "m", "max_prompt_tokens": 8, "max_response_tokens": 8},
           "algorithm": {"optimizer": {"warmup_style": "cosine", "min_lr_ratio": 0.5}}, "buffer": {"total_steps": 4}}
    optimizer = trainer_settings(resolve_stages(config_from_dict(raw, "test"))).stages[0].algorithm.optimizer
    schedule = LRSchedule.from_settings(optimizer, 4)
    assert optimizer.lr_scheduler_type == "cosine"
    assert [schedule(k) / schedule(0) for k in range(4)] == pytest.approx(
        [0.5 + 0.25 * (1 + math.cos(math.pi * k / 4)) for k in range(4)])


# ---- sample checks ---------------------------------------------------------------------------

def _group(**exp_fields) -> Group:
    fields = {"prompt_ids": np.array([1, 2]), "response_ids": np.array([3, 4, 5]),
              "logprobs": np.zeros(3, np.float32), "loss_mask": np.ones(3, np.int8), "reward": 1.0}
    fields.update(exp_fields)
    return Group("math/7", [Experience(**fields)], policy_version=3, explorer="ex_a", rank=2,
                 group_id="ex_a/2/0123456789abcdef/5")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"response_ids": np.array([3, 999, 5])}, "response token id 999 is outside the model's vocabulary"),
        ({"prompt_ids": np.array([-1, 2])}, "prompt token id -1"),
        ({"logprobs": np.zeros(2, np.float32)}, "logprobs has 2 entries but the response has 3 tokens"),
        ({"loss_mask": np.ones(4, np.int8)}, "loss_mask has 4 entries"),
        ({"token_rewards": np.zeros(1, np.float32)}, "token_rewards has 1 entries"),
        ({"prompt_ids": np.array([], np.int64)}, "the prompt is empty"),
        ({"response_ids": np.arange(3, 20), "logprobs": np.zeros(17), "loss_mask": np.ones(17)}, "19 tokens"),
    ],
)
def test_bad_experience_is_named(fields: dict, message: str) -> None:
    with pytest.raises(UserError) as e:
        check_group(_group(**fields), vocab_size=384, max_length=16)
    text = str(e.value)
    assert message in text
    assert "'ex_a/2/0123456789abcdef/5'" in text and "'math/7'" in text and "explorer 'ex_a' rank 2" in text


def test_good_group_becomes_samples_with_its_temperature() -> None:
    g = _group(token_rewards=np.array([0.0, 0.0, 1.0], np.float32))
    g.info = {"temperature": 0.7}
    (s,) = samples_from_groups([g], vocab_size=384, max_length=16, temperature=1.0)
    assert s.temperature == 0.7 and s.policy_version == 3 and s.loss_mask.dtype == bool
    assert s.token_rewards.tolist() == [0.0, 0.0, 1.0] and s.length == 5
    greedy = _group()
    greedy.info = {"temperature": 0.0}
    assert samples_from_groups([greedy], 384, None)[0].temperature == 1.0


# ---- SFT data --------------------------------------------------------------------------------

def test_sft_rows_become_masked_replies(tmp_path: Path, tiny_model: Path) -> None:
    from rfthpc.trainer.sft_data import SFTData, load_tokenizer

    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1 + 1?"},
                          {"role": "assistant", "content": "2"}, {"role": "user", "content": "and 2 + 2?"},
                          {"role": "assistant", "content": "4"}]},
            {"messages": [{"role": "user", "content": "3 + 3?"}, {"role": "assistant", "content": "6"}]}]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = load_tokenizer(tiny_model)
    buf = ExperienceBufferConfig(path=str(path))
    buf.format.prompt_type = "messages"
    data = SFTData(buf, tok, max_length=None)
    first, second = data.take(2)
    assert tok.decode(first.prompt_ids).endswith("1 + 1?<|im_end|>\n<|im_start|>assistant\n")
    # Both replies are trained on, each up to and including its end-of-turn token; nothing else is.
    assert tok.decode(first.response_ids[first.loss_mask]) == "2<|im_end|>4<|im_end|>"
    assert tok.decode(second.response_ids[second.loss_mask]) == "6<|im_end|>"
    assert data.state_dict() == {"consumed": 2}
    third = data.take(1)[0]  # the next epoch starts over
    assert third.response_ids.tolist() == first.response_ids.tolist()
    data.load_state_dict({"consumed": 1})
    assert data.take(1)[0].response_ids.tolist() == second.response_ids.tolist()


# Qwen3's switch, reduced: with thinking off the reply starts with an empty think block.
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}"
)


@pytest.mark.parametrize(("enable_thinking", "prompt_end"),
                         [(None, "assistant\n"), (False, "assistant\n<think></think>")])
def test_sft_renders_with_the_explorers_thinking_switch(tmp_path: Path, tiny_model: Path, enable_thinking: bool | None,
                                                         prompt_end: str) -> None:
    from rfthpc.trainer.sft_data import SFTData, load_tokenizer

    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"prompt": "1 + 1?", "response": "2"}) + "\n")
    buf = ExperienceBufferConfig(path=str(path))
    buf.format.chat_template = THINKING_TEMPLATE
    tok = load_tokenizer(tiny_model)
    sample = SFTData(buf, tok, None, enable_thinking=enable_thinking).take(1)[0]
    assert tok.decode(sample.prompt_ids).endswith(prompt_end)
    assert tok.decode(sample.response_ids[sample.loss_mask]) == "2<|im_end|>"


def test_sft_missing_column_is_named(tmp_path: Path, tiny_model: Path) -> None:
    from rfthpc.trainer.sft_data import SFTData, load_tokenizer

    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    with pytest.raises(UserError, match="format.prompt_key='prompt' is not a column; the columns are: question, answer"):
        SFTData(ExperienceBufferConfig(path=str(path)), load_tokenizer(tiny_model), None)


# ---- stages, signals, algorithm --------------------------------------------------------------

def _stages(*modes: str) -> tuple[TrainerStageSettings, ...]:
    cfg = Config(model=ModelConfig(model_path="model"),
                 stages=[StageConfig(stage_name=f"s{i}", mode=m) for i, m in enumerate(modes)])
    return trainer_settings(resolve_stages(cfg)).stages


def test_resume_position_walks_the_stages() -> None:
    stages = _stages("explore", "train", "both")
    assert resume_position(stages, None) == Position(1, 0, 0)
    mid = CheckpointMeta(step=7, stage="s1", stage_index=1, stage_start_step=0, stage_finished=False,
                         dtype="float32")
    assert resume_position(stages, mid) == Position(1, 0, 7)
    assert resume_position(stages, replace(mid, stage_finished=True)) == Position(2, 7, 7)
    assert resume_position(stages, replace(mid, stage_index=2, stage="s2", stage_finished=True)) is None
    with pytest.raises(UserError, match="stages of a run cannot change"):
        resume_position(stages, replace(mid, stage="renamed"))


def test_stop_request_records_sigterm_and_sigusr2() -> None:
    for sig in (signal.SIGTERM, signal.SIGUSR2):
        stop = StopRequest().install()
        try:
            os.kill(os.getpid(), sig)
            assert stop.requested and stop.reason == signal.Signals(sig).name
        finally:
            stop.restore()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_algorithm_binding_follows_the_preset() -> None:
    grpo = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(algorithm_type="grpo"))).algorithm))
    assert grpo.use_reference and not grpo.use_critic and grpo.recompute_old_logprob
    ppo = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(algorithm_type="ppo"))).algorithm))
    assert ppo.use_critic
    tis = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(algorithm_type="tis"))).algorithm))
    assert not tis.recompute_old_logprob
    sft = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(algorithm_type="sft"))).algorithm))
    assert sft.is_sft and not sft.use_reference
    bad = finalize(Config(algorithm=AlgorithmConfig(algorithm_type="grpo", kl_loss_fn_args={"beta": 1})))
    with pytest.raises(ConfigError, match="kl_loss_fn_args"):
        Algorithm.from_settings(AlgorithmSettings.of(bad.algorithm))


def test_micro_batch_weights_sum_to_the_batch_loss() -> None:
    """Weighting micro-batch losses by count(mb)/count(batch) gives the whole-batch loss (any agg mode)."""
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        alg = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(algorithm_type="grpo",
                                                                               loss_agg_mode=mode))).algorithm))
        torch.manual_seed(0)
        lp = torch.randn(5, 4)
        mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
        adv, ent = torch.randn(5, 4), torch.rand(5, 4)
        full, _ = alg.actor_loss(lp, ent, mask, lp - 0.1, adv, None, None)
        parts = [[0, 2], [1], [3, 4]]
        total = alg.weight(mask)
        summed = sum(alg.actor_loss(lp[p], ent[p], mask[p], lp[p] - 0.1, adv[p], None, None)[0]
                     * alg.weight(mask[p]) / total for p in parts)
        assert summed.item() == pytest.approx(full.item(), rel=1e-6)


@pytest.mark.parametrize("max_norm", [0.0, 1e-3, 1e6])
def test_grad_norm_and_clip_matches_torch_on_a_sharded_model(tiny_model: Path, max_norm: float) -> None:
    """The norm over FSDP2's local shards and the clipped gradients are torch's clip_grad_norm_'s
    on the same model unsharded (grad_clip 0: the norm, no clipping). (One float32 process gets its
    model unwrapped from `build_sharded_model`: the FSDP2 model is made here.)"""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    from rfthpc.trainer.dist import init_distributed
    from rfthpc.trainer.update import grad_norm_and_clip

    env = init_distributed()
    try:
        sharded = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        fully_shard(sharded, mesh=init_device_mesh("cpu", (1,)))
        plain = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        ids = torch.arange(3, 19).view(2, 8)
        for model in (sharded, plain):
            model(input_ids=ids, labels=ids).loss.backward()
        want = torch.nn.utils.clip_grad_norm_(plain.parameters(), max_norm if max_norm > 0 else math.inf)
        got = grad_norm_and_clip(sharded, max_norm)
        assert got == pytest.approx(want.item(), rel=1e-5)
        plain_grads = dict(plain.named_parameters())
        for name, p in sharded.named_parameters():
            assert torch.allclose(p.grad.full_tensor(), plain_grads[name].grad, rtol=1e-4, atol=1e-8), name
    finally:
        env.close()


def test_bare_srun_ranks_meet_on_a_port_that_moves_with_each_requeue(monkeypatch: pytest.MonkeyPatch) -> None:
    """srun without torchrun: the port comes from the job id and restart count, like torchrun's rendezvous."""
    from rfthpc.launch.torchrun import rdzv_port
    from rfthpc.trainer.dist import _rendezvous_env

    ports = []
    for restart in ("0", "1"):
        # A copy of the environment: the function exports RANK, WORLD_SIZE, ... into it.
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
        env.update(MASTER_ADDR="127.0.0.1", SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_JOB_ID="4242",
                   SLURM_RESTART_COUNT=restart)
        monkeypatch.setattr(os, "environ", env)
        assert _rendezvous_env() == (1, 2, 0)
        ports.append(int(env["MASTER_PORT"]))
    assert ports == [rdzv_port("4242", 0), rdzv_port("4242", 1)] and ports[0] != ports[1]
    assert all(p < 32768 for p in ports)  # below the ephemeral range


def test_rows_without_token_rewards_keep_their_outcome_reward_in_a_mixed_batch() -> None:
    """Two workflows in one batch, one giving per-token rewards: the other's groups keep their scalar
    rewards (on the last token, as veRL's token_level_scores) and so their GRPO advantages."""
    from rfthpc.trainer.losses import Algorithm
    from rfthpc.trainer.rl_batch import build_step_tensors
    from rfthpc.trainer.samples import Sample

    grpo = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(algorithm_type="grpo"))).algorithm))

    def sample(reward: float, group: int, token_rewards: list[float] | None = None) -> Sample:
        return Sample(prompt_ids=np.array([1]), response_ids=np.array([2, 3]), loss_mask=np.ones(2, dtype=bool),
                      reward=reward, behaviour_logprobs=np.zeros(2, dtype=np.float32), group=group,
                      token_rewards=None if token_rewards is None else np.array(token_rewards, dtype=np.float32))

    scalar_only = [sample(1.0, 0), sample(0.0, 0)]
    alone, _ = build_step_tensors(scalar_only, grpo)
    mixed, metrics = build_step_tensors(scalar_only + [sample(0.0, 1, [0.5, 0.5]), sample(0.0, 1, [0.0, 0.0])], grpo)
    torch.testing.assert_close(mixed.advantages[:2], alone.advantages)
    assert alone.advantages[0, 0] > 0
    assert metrics["critic/score/mean"] == pytest.approx((1.0 + 0.0 + 1.0 + 0.0) / 4)


def test_a_critic_batch_reports_verls_explained_variance() -> None:
    from rfthpc.trainer.losses import Algorithm
    from rfthpc.trainer.rl_batch import build_step_tensors
    from rfthpc.trainer.samples import Sample

    ppo = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(algorithm_type="ppo"))).algorithm))
    samples = [Sample(prompt_ids=np.array([1]), response_ids=np.array([2, 3]), loss_mask=np.ones(2, dtype=bool),
                      reward=r, behaviour_logprobs=np.zeros(2, dtype=np.float32)) for r in (1.0, 0.0)]
    values = [np.array([0.5, 0.8], dtype=np.float32), np.array([0.1, 0.2], dtype=np.float32)]
    t, metrics = build_step_tensors(samples, ppo, values=values)
    r, v = t.returns.flatten().double(), t.values.flatten().double()
    expected = 1 - torch.var(r - v) / (torch.var(r) + 1e-5)
    assert metrics["critic/vf_explained_var"] == pytest.approx(expected.item())
    assert 0 < metrics["critic/vf_explained_var"] < 1


def test_length_clip_ratios_are_the_share_of_samples_at_the_models_limits() -> None:
    from rfthpc.trainer.losses import Algorithm
    from rfthpc.trainer.rl_batch import build_step_tensors
    from rfthpc.trainer.samples import Sample

    grpo = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(algorithm_type="grpo"))).algorithm))
    samples = [Sample(prompt_ids=np.arange(p), response_ids=np.arange(r), loss_mask=np.ones(r, dtype=bool),
                      reward=float(r), behaviour_logprobs=np.zeros(r, dtype=np.float32))
               for p, r in ((4, 8), (6, 3), (2, 8), (6, 1))]
    _, metrics = build_step_tensors(samples, grpo, max_prompt_tokens=6, max_response_tokens=8)
    assert metrics["response_length/clip_ratio"] == 0.5 and metrics["prompt_length/clip_ratio"] == 0.5
    _, metrics = build_step_tensors(samples, grpo)
    assert "response_length/clip_ratio" not in metrics
