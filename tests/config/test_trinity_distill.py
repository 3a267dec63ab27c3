"""Trinity-RFT's on-policy distillation examples (examples/opd_gsm8k: `opd_gsm8k.yaml`, `opd_gsm8k_jsd.yaml`) as
rfthpc reads them: the teacher, Trinity's first auxiliary model, stays an auxiliary model (its own engines) and
becomes `explorer.teacher_model`, which scores each sample; a config that names `model.teacher_model_path`
itself keeps that teacher in the trainer; the workflow `on_policy_distill_math_workflow` becomes
`math_boxed_workflow`."""

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
def test_trinitys_opd_example_serves_its_teacher_beside_the_explorers(tmp_path: Path, algorithm: str,
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
    assert cfg.model.teacher_model_path is None
    [aux] = cfg.explorer.auxiliary_models
    assert (cfg.explorer.teacher_model, aux.name, aux.model_path) == ("auxiliary_0", "auxiliary_0", str(teacher))
    assert (aux.placement, aux.tensor_parallel_size) == ("shared", 2)  # on GPUs of its own, as Trinity's
    assert [ts.default_workflow_type for ts in cfg.buffer.explorer_input.tasksets] == ["math_boxed_workflow"]
    alg = cfg.algorithm
    assert (alg.advantage_fn, alg.policy_loss_fn, alg.repeat_times) == (advantage, "ppo", 8)
    assert {m.target for m in loaded.mapped} >= {"explorer.teacher_model",
                                                 "buffer.explorer_input.default_workflow_type"}

    # The teacher named for the trainer instead: the auxiliary model leaves, no engines start for it.
    in_trainer = text.replace("model:\n", f"model:\n  teacher_model_path: {teacher}\n", 1)
    cfg = load_config(write(tmp_path, in_trainer)).config
    assert (cfg.model.teacher_model_path, cfg.explorer.teacher_model, cfg.explorer.auxiliary_models) == \
        (str(teacher), None, [])


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


def test_the_served_teacher_is_one_auxiliary_model_and_the_only_teacher(tmp_path: Path) -> None:
    from rfthpc.demos.tinymodel import build_tiny_model
    from rfthpc.errors import ConfigError

    student = build_tiny_model(tmp_path / "student", "tiny", seed=0)
    teacher = build_tiny_model(tmp_path / "teacher", "tiny", seed=1)
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "train.jsonl").write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    text = OPD_GSM8K.format(root=tmp_path / "ckpt", algorithm="on_policy_distill", student=student, teacher=teacher,
                            data=tmp_path / "gsm8k")
    unknown = text.replace("explorer:\n", "explorer:\n  teacher_model: judge\n", 1)
    with pytest.raises(ConfigError, match=r"explorer.teacher_model: 'judge' is not the name of an auxiliary model "
                                          r"\(explorer.auxiliary_models: 'auxiliary_0'\)"):
        load_config(write(tmp_path, unknown))
    both = text.replace("explorer:\n", "explorer:\n  teacher_model: auxiliary_0\n", 1).replace(
        "model:\n", f"model:\n  teacher_model_path: {teacher}\n", 1)
    with pytest.raises(ConfigError, match="explorer.teacher_model and model.teacher_model_path: .* keep one"):
        load_config(write(tmp_path, both))
    unread = text.replace("algorithm_type: on_policy_distill", "algorithm_type: grpo").replace(
        "default_workflow_type: on_policy_distill_math_workflow", "default_workflow_type: math_boxed_workflow").replace(
        "explorer:\n", "explorer:\n  teacher_model: auxiliary_0\n", 1)
    with pytest.raises(ConfigError, match="explorer.teacher_model: 'auxiliary_0' is read only by an advantage"):
        load_config(write(tmp_path, unread))
