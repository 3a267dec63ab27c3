"""DAPO's options (`algorithm.filter_groups`, `algorithm.overlong_buffer`) and ReMax's greedy baseline:
filled by the presets, usable on their own with any algorithm, reachable from veRL's names, checked by
`config validate` with the key and the fix, and resolved into what the explorers read."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.algorithms.shaping import GroupFilter, OverlongPenalty
from rfthpc.config import load_config
from rfthpc.config.settings import explorer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)


def _explorer_stage(tmp_path: Path, text: str, overrides: list[str] | None = None):
    loaded = load_config(write(tmp_path, text), overrides)
    return loaded.config, explorer_settings(loaded.stages).stages[0]


def test_the_dapo_preset_turns_every_part_on(tmp_path: Path, base: str) -> None:  # noqa: F811
    cfg, stage = _explorer_stage(tmp_path, base.replace("algorithm_type: grpo", "algorithm_type: dapo"))
    alg = cfg.algorithm
    assert alg.policy_loss_fn_args == {"clip_range_low": 0.2, "clip_range_high": 0.28}
    assert alg.loss_agg_mode == "token-mean" and alg.kl_loss_fn == "none" and alg.kl_penalty_fn == "none"
    assert stage.filter_groups == GroupFilter("acc", 0)
    # model.max_response_tokens 32: a buffer of 32 // 5 = 6 tokens, factor 1.
    assert stage.overlong == OverlongPenalty(32, 6, 1.0)
    assert not stage.greedy_baseline


def test_a_user_value_wins_over_the_preset_key_by_key(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base.replace("algorithm_type: grpo", "algorithm_type: dapo")
    _, stage = _explorer_stage(tmp_path, text, ["--algorithm.filter_groups.enable", "False",
                                                "--algorithm.overlong_buffer.penalty_factor", "0.5",
                                                "--algorithm.overlong_buffer.len", "8"])
    assert stage.filter_groups is None
    assert stage.overlong == OverlongPenalty(32, 8, 0.5)


def test_a_preset_loss_arguments_stay_with_its_loss(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base.replace("algorithm_type: grpo", "algorithm_type: dapo")
    cfg, _ = _explorer_stage(tmp_path, text, ["--algorithm.policy_loss_fn", "cispo"])
    assert cfg.algorithm.policy_loss_fn == "cispo" and cfg.algorithm.policy_loss_fn_args == {}
    cfg, _ = _explorer_stage(tmp_path, text, ["--algorithm.policy_loss_fn", "ppo"])
    assert cfg.algorithm.policy_loss_fn_args == {"clip_range_low": 0.2, "clip_range_high": 0.28}


def test_each_option_works_with_any_algorithm(tmp_path: Path, base: str) -> None:  # noqa: F811
    _, stage = _explorer_stage(tmp_path, base)
    assert stage.filter_groups is None and stage.overlong is None
    _, stage = _explorer_stage(tmp_path, base, ["--algorithm.filter_groups.enable", "True",
                                                "--algorithm.filter_groups.max_num_gen_batches", "5"])
    assert stage.filter_groups == GroupFilter("reward", 5) and stage.overlong is None
    _, stage = _explorer_stage(tmp_path, base, ["--algorithm.overlong_buffer.enable", "True"])
    assert stage.filter_groups is None and stage.overlong == OverlongPenalty(32, 6, 1.0)


def test_verl_names_reach_the_options(tmp_path: Path, base: str) -> None:  # noqa: F811
    verl = """
trainer:
  trainer_config:
    algorithm:
      filter_groups:
        enable: true
        metric: acc
        max_num_gen_batches: 10
        max_inflight_gen_batches: 2
    reward_model:
      overlong_buffer:
        enable: true
        len: 4
        penalty_factor: 0.5
        log: false
"""
    _, stage = _explorer_stage(tmp_path, base + verl)
    assert stage.filter_groups == GroupFilter("acc", 10)
    assert stage.overlong == OverlongPenalty(32, 4, 0.5)
    recipe = """
trainer:
  trainer_config:
    reward:
      reward_kwargs:
        overlong_buffer_cfg:
          enable: true
          len: 16
"""
    _, stage = _explorer_stage(tmp_path, base + recipe)
    assert stage.overlong == OverlongPenalty(32, 16, 1.0)


def _error(tmp_path: Path, text: str, overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text), overrides)
    return str(e.value)


def test_bad_values_name_the_key_and_the_fix(tmp_path: Path, base: str) -> None:  # noqa: F811
    # Dynamic sampling compares responses: with one per task there is nothing to compare.
    text = base.replace("algorithm_type: grpo", "algorithm_type: reinforceplusplus")
    msg = _error(tmp_path, text, ["--algorithm.repeat_times", "1", "--algorithm.filter_groups.enable", "True"])
    assert "buffer.explorer_input.tasksets[0].repeat_times: 1 response per task, but algorithm.filter_groups" in msg
    assert "set repeat_times >= 2" in msg
    msg = _error(tmp_path, base, ["--algorithm.overlong_buffer.enable", "True", "--algorithm.overlong_buffer.len",
                                  "64", "--algorithm.filter_groups.enable", "True",
                                  "--algorithm.filter_groups.max_num_gen_batches", "-2"])
    assert "algorithm.overlong_buffer.len: 64 must be in [1, model.max_response_tokens = 32]" in msg
    assert "algorithm.filter_groups.max_num_gen_batches: -2 must be >= 0" in msg
    msg = _error(tmp_path, base.replace("  repeat_times: 4\n", "  repeat_times: 4\n  overlong_buffer:\n    lenght: 4\n"), [])
    assert "algorithm.overlong_buffer.lenght: unknown key; did you mean 'algorithm.overlong_buffer.len'" in msg


def test_remax_explorers_generate_a_greedy_baseline(tmp_path: Path, base: str) -> None:  # noqa: F811
    cfg, stage = _explorer_stage(tmp_path, base.replace("algorithm_type: grpo\n  repeat_times: 4",
                                                        "algorithm_type: remax"))
    assert stage.greedy_baseline and cfg.algorithm.repeat_times == 4 and cfg.algorithm.advantage_fn == "remax"
    _, stage = _explorer_stage(tmp_path, base, ["--algorithm.advantage_fn", "remax"])
    assert stage.greedy_baseline
