"""Trinity-RFT's workflow and reward settings are checked when the config is loaded, before the queue:
the auxiliary model a judging workflow asks, and Trinity's DAPO overlong settings, whose place in
rfthpc is algorithm.overlong_buffer."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rfthpc.config import load_config
from tests.config.conftest import write
from tests.config.test_bad_input import BASE, _error, _judge


@pytest.fixture
def base(tmp_path: Path) -> str:
    """test_bad_input's valid config: GSM8K-style rows, math_workflow."""
    (tmp_path / "model").mkdir()
    (tmp_path / "data.jsonl").write_text('{"question": "1+1", "answer": "#### 2"}\n')
    return textwrap.dedent(BASE).format(model=tmp_path / "model", data=tmp_path / "data.jsonl")


def _with(config: str, workflow: str, reward: str | None = None, **args: str) -> str:
    """`config` with the taskset's workflow, reward function and workflow_args set."""
    text = config.replace("default_workflow_type: math_workflow", f"default_workflow_type: {workflow}"
                          + (f"\n    default_reward_fn_type: {reward}" if reward else ""))
    if args:
        text = text.replace("response_key: answer", "response_key: answer\n      workflow_args: {"
                            + ", ".join(f"{k}: {v}" for k, v in args.items()) + "}")
    return text


def _judged(text: str) -> str:
    """`text` with an auxiliary model named `judge` and the GPUs for it."""
    return _judge(text.replace("gpu_per_node: 2", "gpu_per_node: 4"))


def test_trinity_workflows_load(tmp_path: Path, base: str) -> None:
    for text in (_judged(_with(base, "rubric_judge_workflow")),
                 _judged(_with(base, "math_rm_workflow", reward_model="judge")),
                 _with(base, "math_boxed_workflow", "math_dapo_reward", with_think="true"),
                 _with(base, "toolcall_workflow"), _with(base, "math_workflow", "countdown_reward")):
        load_config(write(tmp_path, text))


def test_the_judge_a_workflow_asks_is_checked(tmp_path: Path, base: str) -> None:
    assert ("tasksets[0].default_workflow_type: workflow 'rubric_judge_workflow' asks an auxiliary model "
            "(a judge or a reward model) and explorer.auxiliary_models is empty; add one"
            ) in _error(write(tmp_path, _with(base, "rubric_judge_workflow")))
    for workflow, key in (("math_rm_workflow", "reward_model"), ("rubric_judge_workflow", "judge_model")):
        msg = _error(write(tmp_path, _judged(_with(base, workflow, **{key: "critic"}))))
        assert (f"tasksets[0].workflow_args.{key}: 'critic' is not an auxiliary model of the explorers; "
                "explorer.auxiliary_models are: judge") in msg


def test_trinity_overlong_settings_name_the_overlong_buffer(tmp_path: Path, base: str) -> None:
    dapo = base.replace("default_workflow_type: math_workflow",
                        "default_workflow_type: math_boxed_workflow\n    default_reward_fn_type: math_dapo_reward")
    in_reward = dapo.replace("response_key: answer", "response_key: answer\n      reward_fn_args: "
                             "{enable_overlong_penalty: true, penalty_factor: 0.5, max_response_length: 32, "
                             "cache_length: 8}")
    msg = _error(write(tmp_path, in_reward))
    assert ("tasksets[0].reward_fn_args: enable_overlong_penalty, penalty_factor, max_response_length, cache_length "
            "set Trinity-RFT's DAPO overlong penalty, which rfthpc's explorer adds to every reward as "
            "algorithm.overlong_buffer; remove them and set algorithm.overlong_buffer: "
            "{'enable': True, 'len': 8, 'penalty_factor': 0.5}") in msg
    in_workflow = dapo.replace("response_key: answer", "response_key: answer\n      workflow_args: "
                               "{use_base: true, enable_overlong_penalty: false}")
    msg = _error(write(tmp_path, in_workflow))
    assert ("tasksets[0].workflow_args: enable_overlong_penalty set Trinity-RFT's DAPO overlong penalty, which "
            "rfthpc's explorer adds to every reward as algorithm.overlong_buffer; remove it (the penalty is off)") in msg
    assert "not used by workflow" not in msg


def test_rm_gallery_reward_is_named_as_not_part_of_rfthpc(tmp_path: Path, base: str) -> None:
    text = base.replace("default_workflow_type: math_workflow",
                        "default_workflow_type: math_workflow\n    default_reward_fn_type: rm_gallery_reward")
    msg = _error(write(tmp_path, text))
    assert "default_reward_fn_type: 'rm_gallery_reward' calls RM-Gallery, which is not part of rfthpc" in msg


def test_rows_of_a_workflow_that_reads_no_text_need_no_prompt_or_answer_column(tmp_path: Path, base: str) -> None:
    """env_workflow's rows are an environment's seeds: the column check asks for neither the prompt's
    nor the reference answer's column; a workflow that reads them still needs them."""
    (tmp_path / "seeds.jsonl").write_text('{"env_args": {"seed": 3}}\n')
    seeds = base.replace(str(tmp_path / "data.jsonl"), str(tmp_path / "seeds.jsonl"))
    env = seeds.replace("response_key: answer", "response_key: answer\n      workflow_args: {env: frozen_lake}").replace(
        "default_workflow_type: math_workflow", "default_workflow_type: env_workflow")
    load_config(write(tmp_path, env))
    msg = _error(write(tmp_path, seeds))
    assert "format.prompt_key='question' is not a column" in msg
