"""Explorer-side config keys rfthpc accepts but cannot honour are rejected when the config is loaded,
each with the reason and the fix; the ones it honours reach the explorer's settings."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from rfthpc.config import load_config
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import ConfigError

BASE: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
    "model": {"model_path": "/models/policy", "max_prompt_tokens": 64, "max_response_tokens": 16},
    "cluster": {"node_num": 1, "gpu_per_node": 0},
    "buffer": {"batch_size": 2, "explorer_input": {
        "taskset": {"name": "train", "path": "/data/train.jsonl"},
        "eval_tasksets": [{"name": "test", "path": "/data/test.jsonl"}],
    }},
}


def _set(cfg: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = cfg
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[leaf] = value


def _load(tmp_path: Path, **values: Any):
    cfg = copy.deepcopy(BASE)
    for dotted, value in values.items():
        _set(cfg, dotted.replace("__", "."), value)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return load_config(path, check_paths=False)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("explorer__bench_on_latest_checkpoint", True, r"explorer.bench_on_latest_checkpoint: .*no bench mode"),
        ("explorer__rollout_model__use_v1", False, r"explorer.rollout_model.use_v1: .*V0 engine"),
        ("explorer__auxiliary_models", [{"name": "judge", "model_path": "/m", "use_v1": False}],
         r"explorer.auxiliary_models\[0\].use_v1"),
        ("explorer__rollout_model__name", "actor", r"explorer.rollout_model.name: .*only auxiliary models"),
        ("explorer__rollout_model__model_path", "/models/other",
         r"explorer.rollout_model.model_path: .*starts from model.model_path"),
        ("explorer__rollout_model__max_prompt_tokens", 32,
         r"explorer.rollout_model.max_prompt_tokens: 32 differs from model.max_prompt_tokens \(64\)"),
        ("explorer__rollout_model__max_response_tokens", 8, r"set model.max_response_tokens instead"),
        ("buffer__explorer_input__eval_tasksets__0__total_epochs", 3,
         r"eval_tasksets\[0\].total_epochs: 3 has no effect"),
        ("buffer__explorer_input__eval_tasksets__0__task_selector", {"selector_type": "shuffle"},
         r"eval_tasksets\[0\].task_selector: 'shuffle' has no effect"),
        ("buffer__trainer_input__experience_buffer__format__reply_prefix", "<think>",
         r"experience_buffer.format.reply_prefix: applies to explorer tasksets only"),
    ],
)
def test_keys_rfthpc_cannot_honour_are_rejected(tmp_path: Path, key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, **{key: value})


def test_sql_retries_are_ignored_with_a_note_naming_the_task_retries(tmp_path: Path) -> None:
    """Trinity-RFT's buffer.max_retry_* retry SQL access, which rfthpc's file buffers never need."""
    notes = _load(tmp_path, buffer__max_retry_times=3, buffer__max_retry_interval=1).notes
    [note] = [n for n in notes if "max_retry" in n]
    keys, _, why = note.partition(": ignored: ")
    assert sorted(keys.split(", ")) == ["buffer.max_retry_interval", "buffer.max_retry_times"]
    assert "SQL" in why and "explorer.max_retry_times" in why and "explorer.max_retry_interval" in why


def test_rejection_applies_to_a_stage_override(tmp_path: Path) -> None:
    stages = [{"stage_name": "a"}, {"stage_name": "b", "explorer": {"bench_on_latest_checkpoint": True}}]
    with pytest.raises(ConfigError, match=r"\n  - stage 'b': explorer.bench_on_latest_checkpoint: true"):
        _load(tmp_path, stages=stages)


def test_the_harmless_values_of_those_keys_load(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path, explorer__bench_on_latest_checkpoint=False, explorer__rollout_model__use_v1=True,
        explorer__rollout_model__model_path="/models/policy/", explorer__rollout_model__max_prompt_tokens=64,
        explorer__max_retry_times=4, explorer__max_retry_interval=0.5,
    ).config
    assert (cfg.explorer.max_retry_times, cfg.explorer.max_retry_interval) == (4, 0.5)


def test_prompt_and_sampling_keys_reach_the_explorer(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path, model__logprobs=2, model__enable_thinking=False,
        buffer__explorer_input__reply_prefix="<think>",
        buffer__explorer_input__taskset__rollout_args={"seed": 5},
        buffer__explorer_input__taskset__format={"prompt_type": "messages", "messages_key": "chat",
                                                  "system_prompt_key": "sys", "workflow_key": "wf"},
        buffer__explorer_input__eval_tasksets__0__rollout_args={"logprobs": 0},
        buffer__explorer_input__eval_tasksets__0__format={"reply_prefix": "Answer:"},
    ).config
    train, test = cfg.buffer.explorer_input.tasksets[0], cfg.buffer.explorer_input.eval_tasksets[0]
    train_args, test_args = SamplingArgs.from_config(train.rollout_args), SamplingArgs.from_config(test.rollout_args)
    assert (train_args.logprobs, train_args.seed) == (2, 5)
    assert (test_args.logprobs, test_args.seed) == (0, None)
    assert (train.format.reply_prefix, test.format.reply_prefix) == ("<think>", "Answer:")
    assert cfg.explorer.rollout_model.enable_thinking is False



@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"model__logprobs": 21}, r"buffer\.explorer_input\.tasksets\[0\]\.rollout_args\.logprobs=21: use 0 to 20"),
        ({"buffer__explorer_input__taskset__rollout_args": {"temperature": -0.5}},
         r"tasksets\[0\]\.rollout_args\.temperature=-0\.5: use a value ≥ 0"),
        ({"buffer__explorer_input__eval_tasksets__0__rollout_args": {"top_p": 0}},
         r"eval_tasksets\[0\]\.rollout_args\.top_p=0"),
    ],
)
def test_rollout_args_out_of_range_fail_validation(tmp_path: Path, values: dict[str, Any], message: str) -> None:
    """Caught when the config is loaded (`rfthpc submit` refuses it), not when an explorer starts."""
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, **values)
