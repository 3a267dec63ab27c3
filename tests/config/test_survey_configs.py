"""tools/survey_configs.py classifies configs as `rfthpc config validate --no-path-checks` does and
groups the problems of refused ones."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "survey_configs.py"

VALID = """\
project: p
name: n
algorithm:
  algorithm_type: grpo
  repeat_times: 4
model:
  model_path: /nowhere/model
  max_prompt_tokens: 64
  max_response_tokens: 32
cluster:
  node_num: 1
  gpu_per_node: 2
buffer:
  batch_size: 4
  explorer_input:
    taskset:
      name: t
      path: /nowhere/data.jsonl
      format:
        prompt_key: question
        response_key: answer
    default_workflow_type: math_workflow
"""
# A Trinity-RFT key rfthpc refuses (its data pipelines), and a veRL trainer config that is not a run config.
REFUSED = VALID + "data_processor:\n  task_pipeline:\n    operators:\n      - name: llm_difficulty_score_filter\n"
VERL = "actor_rollout_ref:\n  actor:\n    ppo_epochs: 1\n"


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("survey_configs", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    spec.loader.exec_module(module)
    return module


def test_classifies_a_valid_and_a_refused_config(tool: ModuleType, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "examples" / "a").mkdir(parents=True)
    (tmp_path / "examples" / "a" / "valid.yaml").write_text(VALID)
    (tmp_path / "examples" / "a" / "refused.yaml").write_text(REFUSED)
    (tmp_path / "examples" / "a" / "train_a.yaml").write_text(VERL)
    results, skipped = tool.survey(tmp_path)
    by_path = {r.path: r for r in results}
    assert sorted(by_path) == ["examples/a/refused.yaml", "examples/a/valid.yaml"]
    assert [rel for rel, _ in skipped] == ["examples/a/train_a.yaml"]
    assert by_path["examples/a/valid.yaml"].status == tool.ACCEPTED
    assert by_path["examples/a/valid.yaml"].problems == []
    refused = by_path["examples/a/refused.yaml"]
    assert refused.status == tool.REFUSED and refused.returncode == 2
    assert [p.kind for p in refused.problems] == ["refused features"]
    assert refused.problems[0].text.startswith("data_processor: Trinity-RFT key not supported by rfthpc")
    [(signature, _, files)] = tool.tally(results)
    assert signature[:2] == ("refused features", "data_processor") and files == ["examples/a/refused.yaml"]

    assert tool.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "FIGURES trinity_examples=2 accepted=1 refused=1"
    assert "examples/a/train_a.yaml: veRL trainer config" in out


def test_parses_the_grouped_message_and_merges_list_entries(tool: ModuleType) -> None:
    stderr = """\
rfthpc: note: synchronizer.sync_method: 'nccl' is read as 'checkpoint'
rfthpc: error: invalid config (x.yaml): 3 problems
invalid values:
  - trainer.ulysses_sequence_parallel_size: rfthpc supports only 1
workflow and reward:
  - buffer.explorer_input.tasksets[0].default_workflow_type: unknown workflow 'w'
  - stage 'rft': buffer.explorer_input.eval_tasksets[1].default_workflow_type: unknown workflow 'w'
(the checks after reading ran on the rest of the config: ...)
"""
    problems = tool.parse_problems(stderr)
    assert [p.kind for p in problems] == ["invalid values", "workflow and reward", "workflow and reward"]
    assert problems[0].signature == ("invalid values", "ulysses_sequence_parallel_size", "rfthpc supports only 1")
    assert problems[1].signature == problems[2].signature
    assert problems[1].signature == ("workflow and reward", "default_workflow_type", "unknown workflow 'w'")
    shared = tool.Problem("refused features", "a.x.strategy, b.strategy: veRL keys not supported by rfthpc: why")
    assert shared.signature == ("refused features", "strategy", "veRL keys not supported by rfthpc: why")


def test_single_errors_tracebacks_and_placeholders(tool: ModuleType) -> None:
    [single] = tool.parse_problems("rfthpc: error: x.yaml: model.model_path: cannot resolve an interpolation\n")
    assert single.kind == tool.SINGLE and single.text == "x.yaml: model.model_path: cannot resolve an interpolation"
    assert tool.classify(0, "") == tool.ACCEPTED
    assert tool.classify(2, "rfthpc: error: invalid config (x): 1 problem") == tool.REFUSED
    assert tool.classify(1, "Traceback (most recent call last):\n  ...") == tool.CRASHED
    assert tool.classify(2, "Traceback (most recent call last):\n  ...") == tool.CRASHED
    text = "a: ${oc.env:SURVEY_A}\nb: ${oc.env:SURVEY_B,default}\nc: ${oc.env:SURVEY_C}\n#  d: ${oc.env:SURVEY_D}\n"
    assert tool.env_placeholders(text, {"SURVEY_C": "set"}) == {"SURVEY_A": "/placeholder/SURVEY_A"}
