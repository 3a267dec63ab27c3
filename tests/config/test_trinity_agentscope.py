"""Trinity-RFT's AgentScope examples as rfthpc reads them: examples/agentscope_react/gsm8k.yaml (AgentScope 1.x,
`as_react_workflow` under `multi_step_grpo`) validates as written, the AgentScope interpreter named by
RFTHPC_AGENTSCOPE_PYTHON; the AgentScope 0.x workflows of the older tool-react example are refused naming the
version and the 1.x workflow to use."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.errors import ConfigError
from tests.config.conftest import write

# The shape of Trinity-RFT's examples/agentscope_react/gsm8k.yaml (its model, GPUs, engines and vLLM settings).
AGENTSCOPE_REACT_GSM8K = """
project: AgentScope-ReAct
name: GSM8K-Qwen3-8B
checkpoint_root_dir: {root}
algorithm:
  algorithm_type: multi_step_grpo
  repeat_times: 8
  optimizer:
    lr: 1e-6
model:
  model_path: /models/Qwen2.5-1.5B-Instruct
  max_response_tokens: 16384
  max_model_len: 24576
cluster:
  node_num: 1
  gpu_per_node: 8
buffer:
  total_epochs: 1
  batch_size: 32
  train_batch_size: 256
  explorer_input:
    taskset:
      name: gsm8k
      storage_type: file
      path: /data/gsm8k
      subset_name: 'main'
      split: 'train'
      format:
        prompt_key: 'question'
        response_key: 'answer'
      rollout_args:
        temperature: 1.0
      default_workflow_type: '{workflow}'
    eval_tasksets: []
  trainer_input:
    experience_buffer:
      name: agentscope_gsm8k_buffer
      storage_type: queue
explorer:
  eval_interval: 50
  runner_per_model: 8
  max_timeout: 360
  rollout_model:
    engine_num: 4
    tensor_parallel_size: 1
    enable_prefix_caching: false
    enforce_eager: false
    enable_openai_api: true
    enable_history: true
    enable_auto_tool_choice: true
    tool_call_parser: hermes
    reasoning_parser: deepseek_r1
    enable_thinking: true
    dtype: bfloat16
    seed: 42
synchronizer:
  sync_style: dynamic_by_explorer
  sync_method: 'nccl'
  sync_interval: 2
  sync_timeout: 1200
trainer:
  save_interval: 100
  grad_clip: 1.0
  use_dynamic_bsz: true
  max_token_len_per_gpu: 24576
  ulysses_sequence_parallel_size: 2
monitor:
  monitor_type: tensorboard
"""


def test_trinitys_agentscope_react_example_validates(tmp_path: Path, agentscope_python: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RFTHPC_AGENTSCOPE_PYTHON", agentscope_python)
    text = AGENTSCOPE_REACT_GSM8K.format(root=tmp_path, workflow="as_react_workflow")
    cfg = load_config(write(tmp_path, text), check_paths=False).config
    (taskset,) = cfg.buffer.explorer_input.tasksets
    assert taskset.default_workflow_type == "as_react_workflow"
    assert (cfg.algorithm.algorithm_type, cfg.algorithm.advantage_fn) == ("multi_step_grpo", "step_wise_grpo")


@pytest.mark.parametrize("workflow", ["agentscope_reactv2_math_workflow", "agentscopev0_react_math_workflow"])
def test_agentscope_0x_workflows_are_refused_naming_the_version(tmp_path: Path, workflow: str) -> None:
    text = AGENTSCOPE_REACT_GSM8K.format(root=tmp_path, workflow=workflow)
    message = str(pytest.raises(ConfigError, load_config, write(tmp_path, text), check_paths=False).value)
    assert "written for AgentScope 0.x" in message and "agentscope_react_math_workflow" in message
