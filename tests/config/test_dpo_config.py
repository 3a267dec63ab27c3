"""Trinity-RFT's `algorithm_type: dpo`: its example's form loads as a trainer-only stage on a preference
dataset, and what DPO cannot run with is refused by `config validate`, with the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.config.settings import trainer_settings
from rfthpc.errors import ConfigError
from rfthpc.trainer.losses import Algorithm
from tests.config.conftest import write

# dpo_humanlike/dpo.yaml of Trinity-RFT 0.5.2, its paths local.
TRINITY_DPO = """\
project: dpo_example
name: trinity_dpo
mode: train
algorithm:
  algorithm_type: dpo
  optimizer:
    lr: 5e-7
    lr_warmup_steps_ratio: 0.03
    min_lr_ratio: 0.1
    lr_scheduler_type: cosine
    betas: [0.9, 0.95]
  kl_loss_fn: k1
  kl_loss_fn_args:
    kl_coef: 0.1
model:
  model_path: {model}
  max_response_tokens: 1024
  max_model_len: 1536
cluster:
  node_num: 1
  gpu_per_node: 8
buffer:
  total_epochs: 2
  train_batch_size: 64
  trainer_input:
    experience_buffer:
      name: dpo_buffer
      storage_type: file
      enable_progress_bar: True
      path: {data}
      format:
        prompt_type: plaintext
        prompt_key: prompt
        chosen_key: chosen
        rejected_key: rejected
synchronizer:
  sync_method: 'checkpoint'
  sync_interval: 30
  sync_timeout: 1200
trainer:
  save_interval: 30
  total_steps: 200
  use_dynamic_bsz: false
  max_token_len_per_gpu: 16384
"""


@pytest.fixture
def dpo_yaml(tmp_path: Path) -> str:
    (tmp_path / "model").mkdir()
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "q", "chosen": "a", "rejected": "b"}\n')
    return TRINITY_DPO.format(model=tmp_path / "model", data=data)


def _problems(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    return str(e.value)


def test_trinitys_example_is_a_trainer_only_dpo_stage(tmp_path: Path, dpo_yaml: str) -> None:
    loaded = load_config(write(tmp_path, dpo_yaml))
    alg = loaded.config.algorithm
    assert alg.policy_loss_fn == "dpo" and alg.advantage_fn is None and alg.repeat_times == 1
    assert alg.loss_agg_mode == "seq-mean-token-mean" and alg.entropy_loss_fn == "none"
    # The KL loss the config names is kept, on top of DPO's loss (as Trinity-RFT adds it).
    assert alg.kl_loss_fn == "k1" and alg.kl_loss_fn_args == {"kl_coef": 0.1}
    (stage,) = trainer_settings(loaded.stages).stages
    assert stage.train_batch_size == 64 and stage.algorithm.rollout_correction.active is False
    assert stage.sft_data.format.chosen_key == "chosen"
    # The trainer loads the reference for the loss, and computes the policy at each step's start.
    algorithm = Algorithm.from_settings(stage.algorithm)
    assert algorithm.is_preference and algorithm.is_sft and algorithm.use_reference and algorithm.needs_start_policy


def test_a_dpo_stage_with_explorers_is_refused(tmp_path: Path, dpo_yaml: str) -> None:
    message = _problems(tmp_path, dpo_yaml.replace("mode: train", "mode: both"))
    assert "mode: DPO trains on a preference dataset with the trainer alone" in message
    assert "set mode: train" in message


@pytest.mark.parametrize(("change", "expected"), [
    ("  loss_agg_mode: token-mean\n", "algorithm.loss_agg_mode: DPO's loss is a mean over pairs"),
    ("  policy_loss_fn_args:\n    label_smoothing: 0.5\n",
     "algorithm.policy_loss_fn_args.label_smoothing: 0.5 is not a probability in [0, 0.5)"),
    ("  policy_loss_fn_args:\n    beta: 0\n", "algorithm.policy_loss_fn_args.beta: 0 must be > 0"),
    ("  policy_loss_fn: sft\n", "set policy_loss_fn: dpo"),
])
def test_what_dpo_cannot_train_with_is_refused(tmp_path: Path, dpo_yaml: str, change: str, expected: str) -> None:
    assert expected in _problems(tmp_path, dpo_yaml.replace("algorithm:\n", "algorithm:\n" + change, 1))


def test_the_dpo_loss_outside_a_dpo_stage_is_refused(tmp_path: Path, dpo_yaml: str) -> None:
    text = dpo_yaml.replace("algorithm_type: dpo", "algorithm_type: sft\n  policy_loss_fn: dpo")
    assert "trains on preference pairs, which only a dpo stage reads; set algorithm.algorithm_type: dpo" in (
        _problems(tmp_path, text))


def test_a_missing_preference_column_is_named(tmp_path: Path, dpo_yaml: str) -> None:
    text = dpo_yaml.replace("rejected_key: rejected", "rejected_key: worse")
    assert "format.rejected_key='worse' is not a column" in _problems(tmp_path, text)
