"""Trinity-RFT's on-policy distillation examples (examples/opd_gsm8k: `opd_gsm8k.yaml`, `opd_gsm8k_jsd.yaml`) as
rfthpc reads them: the teacher, Trinity's first auxiliary model, becomes the trainer's `model.teacher_model_path`
and leaves the auxiliary models; the workflow `on_policy_distill_math_workflow` becomes `math_boxed_workflow`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from tests.config.conftest import write

# The shape of Trinity-RFT's examples/opd_gsm8k/opd_gsm8k.yaml (its student and teacher, its GPUs and engines).
OPD_GSM8K = """
project: Trinity-RFT-gsm8k-opd
name: qwen2.5-1.5B-distill-from-math-7B
checkpoint_root_dir: {root}
algorithm:
  algorithm_type: {algorithm}
  repeat_times: 8
  optimizer:
    lr: 1e-5
  advantage_fn_args:
    kl_coef: 1.0
model:
  model_path: {student}
  max_response_tokens: 1024
  max_model_len: 2048
cluster:
  node_num: 1
  gpu_per_node: 8
buffer:
  total_epochs: 1
  batch_size: 96
  explorer_input:
    taskset:
      name: gsm8k
      storage_type: file
      path: {data}
      split: train
      format:
        prompt_key: question
        response_key: answer
      rollout_args:
        temperature: 1.0
    default_workflow_type: on_policy_distill_math_workflow
  trainer_input:
    experience_buffer:
      name: gsm8k_opd_buffer
      storage_type: queue
explorer:
  eval_interval: 50
  runner_per_model: 8
  rollout_model:
    engine_num: 4
    tensor_parallel_size: 1
    enable_prefix_caching: false
    enforce_eager: true
    dtype: bfloat16
    seed: 42
  auxiliary_models:
    - model_path: {teacher}
      engine_num: 1
      tensor_parallel_size: 2
      enable_prefix_caching: false
      enforce_eager: true
      dtype: bfloat16
      seed: 42
      max_model_len: 4096
      max_prompt_tokens: 2048
      max_response_tokens: 1024
synchronizer:
  sync_method: nccl
  sync_interval: 1
  sync_timeout: 1200
trainer:
  save_interval: 100
  grad_clip: 1.0
  use_dynamic_bsz: true
  max_token_len_per_gpu: 16384
  ulysses_sequence_parallel_size: 1
monitor:
  monitor_type: wandb
"""


@pytest.mark.parametrize("algorithm, advantage", [("on_policy_distill", "on_policy_distill"), ("jsd", "jsd")])
def test_trinitys_opd_example_runs_with_the_teacher_in_the_trainer(tmp_path: Path, algorithm: str,
                                                                   advantage: str) -> None:
    from rfthpc.demos.tinymodel import build_tiny_model

    student = build_tiny_model(tmp_path / "student", "student", seed=0)
    teacher = build_tiny_model(tmp_path / "teacher", "demo", seed=1)  # larger, the same tokenizer
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "train.jsonl").write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    text = OPD_GSM8K.format(root=tmp_path / "ckpt", algorithm=algorithm, student=student, teacher=teacher,
                            data=tmp_path / "gsm8k")
    loaded = load_config(write(tmp_path, text))
    cfg = loaded.config
    assert cfg.model.teacher_model_path == str(teacher)
    assert cfg.explorer.auxiliary_models == []
    assert [ts.default_workflow_type for ts in cfg.buffer.explorer_input.tasksets] == ["math_boxed_workflow"]
    alg = cfg.algorithm
    assert (alg.advantage_fn, alg.policy_loss_fn, alg.repeat_times) == (advantage, "ppo", 8)
    assert {m.target for m in loaded.mapped} >= {"model.teacher_model_path",
                                                 "buffer.explorer_input.default_workflow_type"}


def test_a_teacher_with_another_tokenizer_in_trinitys_example_is_refused(tmp_path: Path) -> None:
    from rfthpc.demos.tinymodel import build_tiny_model
    from rfthpc.errors import ConfigError

    student = build_tiny_model(tmp_path / "student", "tiny", seed=0)
    teacher = build_tiny_model(tmp_path / "teacher", "demo", seed=0)  # the demo's 512-token vocabulary
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "train.jsonl").write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    text = OPD_GSM8K.format(root=tmp_path / "ckpt", algorithm="on_policy_distill", student=student, teacher=teacher,
                            data=tmp_path / "gsm8k")
    with pytest.raises(ConfigError, match="the teacher's tokenizer differs from the policy's"):
        load_config(write(tmp_path, text))
