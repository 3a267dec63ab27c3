"""Trinity-RFT's `experience_buffer.replay_buffer` (and `capacity`): its keys and defaults, read into the
trainer's replay policy, and bad values refused with the key and the fix."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest

from rfthpc.algorithms.replay import ReplayPolicy
from rfthpc.config import load_config
from rfthpc.config.settings import trainer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write

BASE = """
project: p
name: n
algorithm:
  algorithm_type: grpo
  repeat_times: 4
model:
  model_path: {model}
  max_prompt_tokens: 64
  max_response_tokens: 32
synchronizer:
  sync_interval: 1
  sync_offset: {offset}
buffer:
  batch_size: 4
  explorer_input:
    taskset:
      name: t
      path: {data}
      format:
        prompt_key: question
        response_key: answer
  trainer_input:
    experience_buffer:
      name: experience_buffer
      storage_type: queue
"""


def _config(tmp_path: Path, buffer: str, offset: int = 2, tail: str = "") -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "data.jsonl").write_text('{"question": "1+1", "answer": "#### 2"}\n')
    text = textwrap.dedent(BASE).format(model=tmp_path / "model", data=tmp_path / "data.jsonl", offset=offset)
    return write(tmp_path, text + textwrap.indent(textwrap.dedent(buffer), " " * 6) + textwrap.dedent(tail))


def _replay(path: Path, overrides: list[str] | None = None) -> list[ReplayPolicy | None]:
    return [s.replay for s in trainer_settings(load_config(path, overrides).stages).stages]


def test_trinitys_replay_buffer_section_is_read_with_trinitys_defaults(tmp_path: Path) -> None:
    assert _replay(_config(tmp_path, "")) == [None]
    path = _config(tmp_path, """
        replay_buffer:
          enable: true
    """)
    (policy,) = _replay(path)
    assert policy == ReplayPolicy(capacity=10000, reuse_cooldown_s=None, priority_fn="linear_decay",
                                  priority_fn_args={"decay": 2.0})
    assert not policy.reuses


def test_trinitys_replay_example_is_read_as_written(tmp_path: Path) -> None:
    path = _config(tmp_path, """
        capacity: 64
        replay_buffer:
          enable: true
          reuse_cooldown_time: 1.5
          priority_fn: decay_limit_randomization
          priority_fn_args:
            decay: 1.2
            use_count_limit: 2
            sigma: 0.5
    """)
    (policy,) = _replay(path)
    assert (policy.capacity, policy.reuse_cooldown_s, policy.priority_fn) == (64, 1.5, "decay_limit_randomization")
    assert dict(policy.priority_fn_args) == {"decay": 1.2, "use_count_limit": 2, "sigma": 0.5}
    # The name Trinity-RFT's configuration guide gives it, and a command-line override.
    (alias,) = _replay(path, ["--buffer.trainer_input.experience_buffer.replay_buffer.priority_fn",
                              "linear_decay_use_count_control_randomization"])
    assert alias.priority(4, 2, random.Random(0)) is None


def test_an_sft_stage_reads_its_dataset_without_replay(tmp_path: Path) -> None:
    (tmp_path / "sft.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}, '
                                        '{"role": "assistant", "content": "hello"}]}\n')
    path = _config(tmp_path, """
        replay_buffer:
          enable: true
          reuse_cooldown_time: 0
    """, tail=f"""
        stages:
          - stage_name: warmup
            mode: train
            algorithm:
              algorithm_type: sft
            buffer:
              total_steps: 1
              trainer_input:
                experience_buffer:
                  path: {tmp_path / "sft.jsonl"}
                  format:
                    prompt_type: messages
          - stage_name: rft
    """)
    sft, rl = _replay(path)
    assert sft is None and rl is not None and rl.reuses


@pytest.mark.parametrize(("buffer", "offset", "wanted"), [
    ("capacity: 0\nreplay_buffer: {enable: true}",
     2, ["buffer.trainer_input.experience_buffer.capacity: 0; the replay buffer must hold at least 1 group"]),
    ("replay_buffer: {enable: true, reuse_cooldown_time: -1}",
     2, ["replay_buffer.reuse_cooldown_time: -1.0; give seconds >= 0, or null"]),
    ("replay_buffer: {enable: true, priority_fn: fifo}",
     2, ["replay_buffer.priority_fn: unknown replay priority function 'fifo'; known: decay_limit_randomization"]),
    ("replay_buffer: {enable: true, priority_fn_args: {decay: 1, limit: 3}}",
     2, ["replay_buffer.priority_fn_args: 'limit' not accepted by replay priority function 'linear_decay'"]),
    ("replay_buffer: {enable: true, priority_fn: decay_limit_randomization, priority_fn_args: {sigma: -1}}",
     2, ["priority_fn_args: {'sigma': -1} do not suit priority function 'decay_limit_randomization'",
         "sigma must be >= 0"]),
    ("replay_buffer: {enable: true, reuse_cooldown_time: 5}",
     0, ["replay_buffer.reuse_cooldown_time: a group read would be read again",
         "synchronizer.max_staleness is 0", "raise synchronizer.max_staleness"]),
    ("replay_buffer: {enable: true, reuse_cooldown: 5}",
     2, ["replay_buffer.reuse_cooldown: unknown key; did you mean",
         "'buffer.trainer_input.experience_buffer.replay_buffer.reuse_cooldown_time'?"]),
])
def test_bad_replay_settings_name_the_key_and_the_fix(tmp_path: Path, buffer: str, offset: int,
                                                      wanted: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(_config(tmp_path, buffer, offset=offset))
    for text in wanted:
        assert text in str(e.value)


def test_replay_without_reuse_is_fine_on_policy(tmp_path: Path) -> None:
    """Reading newest-first once each needs no staleness to spare."""
    (policy,) = _replay(_config(tmp_path, "replay_buffer: {enable: true}", offset=0))
    assert policy is not None and not policy.reuses
