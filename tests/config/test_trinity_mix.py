"""Trinity-RFT's SFT+RL mixing examples (examples/mix_math, examples/mix_chord) as rfthpc reads them: the expert
dataset from `sft_warmup_dataset` (their form) as the mix strategy's auxiliary buffer, the older
`explore_batch_size`, and the loss arguments that only size Trinity's per-GPU weighting dropped with a note."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.errors import ConfigError
from tests.config.conftest import write

# The shape of Trinity-RFT's examples/mix_math/mix_math.yaml (its GPUs, engines and sizes), local paths.
MIX_MATH = """
project: mix_math
name: expert0.25_mu0.1
checkpoint_root_dir: {root}
algorithm:
  algorithm_type: mix
  repeat_times: 8
  sample_strategy_args:
    expert_data_ratio: 0.25
  policy_loss_fn_args:
    mu: 0.1
    clip_range: 0.2
    use_token_level_loss_in_sft: False
    use_dynamic_bsz: False
    repeat_times: 8
    ppo_mini_batch_size: 32
    ppo_micro_batch_size_per_gpu: 4
    ngpus_trainer: 4
    read_batch_size_expert: 64
    read_batch_size_usual: 192
model:
  model_path: {model}
  max_prompt_tokens: 1024
  max_response_tokens: 10240
cluster:
  node_num: 1
  gpu_per_node: 8
buffer:
  total_epochs: 1
  batch_size: 40
  explore_batch_size: 36
  explorer_input:
    taskset:
      name: math_train
      storage_type: file
      path: {data}
      split: 'train'
      format:
        prompt_key: 'problem'
        response_key: 'answer'
      rollout_args:
        temperature: 1.0
        logprobs: 0
    default_workflow_type: 'math_workflow'
  trainer_input:
    experience_buffer:
      name: math_buffer
      storage_type: queue
    sft_warmup_dataset:
      name: math_sft
      storage_type: file
      algorithm_type: sft
      path: {expert}
      split: 'train'
      format:
        prompt_type: messages
        messages_key: 'messages'
explorer:
  eval_interval: 10
  runner_num: 16
  rollout_model:
    engine_type: vllm_async
    engine_num: 4
    tensor_parallel_size: 1
    dtype: bfloat16
synchronizer:
  sync_method: 'nccl'
  sync_interval: 1
"""


@pytest.fixture
def mix_math(tmp_path: Path) -> str:
    for d in ("model", "math", "expert"):
        (tmp_path / d).mkdir()
    return MIX_MATH.format(root=tmp_path / "ckpt", model=tmp_path / "model", data=tmp_path / "math",
                           expert=tmp_path / "expert")


def test_trinitys_mix_math_reads_its_expert_data_beside_the_rollouts(tmp_path: Path, mix_math: str) -> None:
    loaded = load_config(write(tmp_path, mix_math))
    cfg = loaded.config
    alg, b = cfg.algorithm, cfg.buffer
    assert (alg.sample_strategy, alg.advantage_fn, alg.policy_loss_fn, alg.entropy_loss_fn) == ("mix", "grpo", "mix",
                                                                                                  "mix")
    # Trinity's loss arguments less the per-GPU bookkeeping rfthpc does not need.
    assert alg.policy_loss_fn_args == {"mu": 0.1, "clip_range": 0.2, "use_token_level_loss_in_sft": False}
    assert any("ngpus_trainer" in n and "not used" in n for n in loaded.notes)
    expert = b.trainer_input.auxiliary_buffers["sft_dataset"]
    assert (expert.path, expert.format.prompt_type) == (str(tmp_path / "expert"), "messages")
    # explore_batch_size is the explorers' tasks per step; the trainer's 40 tasks of 8 are 80 expert rows and 240
    # rollouts (30 groups), as in Trinity's example.
    assert (b.batch_size, b.train_batch_size) == (36, 320)
    assert {m.target for m in loaded.mapped} >= {"buffer.trainer_input.auxiliary_buffers.sft_dataset",
                                                 "buffer.batch_size", "buffer.train_batch_size"}


def test_a_mix_needs_its_expert_data_and_whole_groups(tmp_path: Path, mix_math: str) -> None:
    start = mix_math.index("    sft_warmup_dataset:")
    no_expert = mix_math[:start] + mix_math[mix_math.index("explorer:\n"):]
    with pytest.raises(ConfigError, match="auxiliary_buffers.sft_dataset: missing; the mix strategy reads"):
        load_config(write(tmp_path, no_expert))
    uneven = mix_math.replace("expert_data_ratio: 0.25", "expert_data_ratio: 0.31")  # 100 expert rows, 220 rollouts
    with pytest.raises(ConfigError, match="not whole groups of algorithm.repeat_times 8"):
        load_config(write(tmp_path, uneven))
    bad_mu = mix_math.replace("    mu: 0.1", "    mu: 1.5")
    with pytest.raises(ConfigError, match=r"policy_loss_fn_args.mu must lie in \[0, 1\]"):
        load_config(write(tmp_path, bad_mu))
