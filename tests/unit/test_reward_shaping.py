"""DAPO's soft overlong penalty and dynamic sampling's group filter, by hand at the boundaries."""

from __future__ import annotations

import pytest

from rfthpc.algorithms.shaping import GroupFilter, OverlongPenalty, group_filter, overlong_penalty
from rfthpc.config.algorithm import FilterGroupsConfig, OverlongBufferConfig
from rfthpc.errors import ConfigError, UserError
from rfthpc.workflows.base import Experience

# L_max = 20, L_cache = 4: no penalty up to 16 tokens, then -1/4 per token down to -1 at 20.
PENALTY = OverlongPenalty(max_len=20, buffer_len=4, penalty_factor=1.0)


@pytest.mark.parametrize(("length", "expected"), [
    (0, 0.0), (15, 0.0), (16, 0.0),  # up to L_max - L_cache: nothing
    (17, -0.25), (18, -0.5), (19, -0.75),  # (16 - L) / 4 inside the buffer
    (20, -1.0),  # at the limit: the whole penalty
    (21, -1.0), (40, -1.0),  # past it (a multi-turn response with environment tokens): no more than -1
])
def test_penalty_at_and_around_the_buffer(length: int, expected: float) -> None:
    assert PENALTY.penalty(length) == expected


def test_penalty_factor_scales_it() -> None:
    half = OverlongPenalty(max_len=20, buffer_len=4, penalty_factor=0.5)
    assert [half.penalty(n) for n in (16, 18, 20, 30)] == [0.0, -0.25, -0.5, -0.5]


def test_veRL_reward_manager_values() -> None:
    """veRL's DAPO reward manager: min(-(L - (L_max - L_cache)) / L_cache * factor, 0), for L <= L_max.
    L_max 1024, L_cache 256, factor 1.5: L = 900 is 132 tokens into the buffer: -132/256*1.5 = -0.7734375."""
    p = OverlongPenalty(max_len=1024, buffer_len=256, penalty_factor=1.5)
    assert p.penalty(768) == 0.0
    assert p.penalty(900) == -0.7734375
    assert p.penalty(1024) == -1.5


def test_trinity_math_dapo_reward_values() -> None:
    """Trinity-RFT's math_dapo_reward (max_response_length 20480, cache_length 4096, penalty_factor 1.0,
    its DAPO example): 0 below 16384 tokens, (16384 - L) / 4096 up to 20480, -1 beyond; read as
    len 4096 with model.max_response_tokens 20480. L = 17408 is 1024 tokens in: -0.25."""
    p = OverlongPenalty(max_len=20480, buffer_len=4096, penalty_factor=1.0)
    assert [p.penalty(n) for n in (16383, 16384, 17408, 19456, 20480, 20481)] == [0.0, 0.0, -0.25, -0.75, -1.0, -1.0]


def _exp(n_tokens: int, reward: float, **components: float) -> Experience:
    return Experience(prompt_token_ids=[1], response_token_ids=[7] * n_tokens, logprobs=[0.0] * n_tokens,
                      loss_mask=[1] * n_tokens, reward=reward, reward_components=dict(components))


def test_apply_adds_the_penalty_to_each_reward_and_records_it() -> None:
    exps = [_exp(10, 1.0), _exp(18, 1.0), _exp(20, 0.0)]
    PENALTY.apply(exps)
    assert [e.reward for e in exps] == [1.0, 0.5, -1.0]
    assert [e.info["overlong_penalty"] for e in exps] == [0.0, -0.5, -1.0]


def test_filter_on_the_reward_sees_the_penalty() -> None:
    """All correct, one overlong: the penalised rewards differ, so the group has contrast on `reward`
    but none on `acc` (the reward function's own score, DAPO's choice)."""
    exps = [_exp(10, 1.0, accuracy=1.0), _exp(18, 1.0, accuracy=1.0)]
    scores = [e.reward for e in exps]
    PENALTY.apply(exps)
    assert GroupFilter("reward", 0).keeps(exps, scores)
    assert GroupFilter("seq_final_reward", 0).values(exps, scores) == [1.0, 0.5]
    assert not GroupFilter("acc", 0).keeps(exps, scores)
    assert GroupFilter("score", 0).values(exps, scores) == [1.0, 1.0]
    assert not GroupFilter("accuracy", 0).keeps(exps, scores)


def test_filter_prefers_a_component_of_the_metric_name() -> None:
    exps = [_exp(3, 1.5, acc=1.0, format=0.5), _exp(3, 1.0, acc=0.5, format=0.5)]
    assert GroupFilter("acc", 0).values(exps, [1.5, 1.0]) == [1.0, 0.5]
    assert not GroupFilter("format", 0).keeps(exps, [1.5, 1.0])


def test_filter_keeps_contrast_and_lone_responses() -> None:
    f = GroupFilter("reward", 0)
    assert f.keeps([_exp(2, 0.0), _exp(2, 0.0), _exp(2, 1.0)], [0.0, 0.0, 1.0])
    assert not f.keeps([_exp(2, 0.0), _exp(2, 0.0)], [0.0, 0.0])
    assert not f.keeps([_exp(2, 1.0)] * 4, [1.0] * 4)
    assert f.keeps([_exp(2, 1.0)], [1.0])  # one response: nothing to compare (veRL keeps it too)


def test_an_unknown_component_is_named_unless_the_reward_failed() -> None:
    exps = [_exp(2, 1.0, accuracy=1.0), _exp(2, 0.0, accuracy=0.0)]
    with pytest.raises(UserError, match=r"filter_groups.metric: 'correct' is not a component.*\['accuracy'\]"):
        GroupFilter("correct", 0).keeps(exps, [1.0, 0.0])
    failed = [_exp(2, 0.0), _exp(2, 0.0)]
    for e in failed:
        e.info["reward_error"] = "boom"
    assert not GroupFilter("correct", 0).keeps(failed, [0.0, 0.0])


def test_resolution_defaults_and_errors() -> None:
    assert group_filter(FilterGroupsConfig()) is None
    assert group_filter(FilterGroupsConfig(enable=True)) == GroupFilter("reward", 0)
    assert group_filter(FilterGroupsConfig(enable=True, metric="acc", max_num_gen_batches=3)) == GroupFilter("acc", 3)
    with pytest.raises(ConfigError, match="max_num_gen_batches: -1 must be >= 0"):
        group_filter(FilterGroupsConfig(enable=True, max_num_gen_batches=-1))
    assert overlong_penalty(OverlongBufferConfig(), 100) is None
    # The paper's buffer: a fifth of the response limit (4096 of 20480).
    assert overlong_penalty(OverlongBufferConfig(enable=True), 20480) == OverlongPenalty(20480, 4096, 1.0)
    assert overlong_penalty(OverlongBufferConfig(enable=True, len=8, penalty_factor=0.5), 32) == \
        OverlongPenalty(32, 8, 0.5)
    with pytest.raises(ConfigError, match=r"overlong_buffer.len: 33 must be in \[1, model.max_response_tokens = 32\]"):
        overlong_penalty(OverlongBufferConfig(enable=True, len=33), 32)
    with pytest.raises(ConfigError, match="overlong_buffer.len: 0"):
        overlong_penalty(OverlongBufferConfig(enable=True, len=0), 32)
    with pytest.raises(ConfigError, match="penalty_factor: -1.0 must be >= 0"):
        overlong_penalty(OverlongBufferConfig(enable=True, penalty_factor=-1), 32)
    with pytest.raises(ConfigError, match="model.max_response_tokens, which is not set"):
        overlong_penalty(OverlongBufferConfig(enable=True), None)
