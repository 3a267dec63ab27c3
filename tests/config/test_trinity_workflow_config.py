"""Trinity-RFT's workflow and reward settings are checked when the config is loaded, before the queue:
the auxiliary model a judging workflow asks; Trinity's DAPO overlong settings are read as rfthpc's
algorithm.overlong_buffer."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rfthpc.config import load_config
from tests.config.conftest import write
from tests.config.test_bad_input import BASE, _error, _judge
from tests.test_cli import rfthpc


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


def test_ruler_workflows_load_and_their_judge_is_checked_before_anything_runs(tmp_path: Path, base: str) -> None:
    """math_ruler_workflow asks an auxiliary model (Trinity's example names none: the only one);
    math_trainable_ruler_workflow asks none, and takes rfthpc's ground_truth_probability."""
    load_config(write(tmp_path, _judged(_with(base, "math_ruler_workflow"))))
    load_config(write(tmp_path, _judged(_with(base, "math_ruler_workflow", judge_model="judge"))))
    load_config(write(tmp_path, _with(base, "math_trainable_ruler_workflow", ground_truth_probability="0.5")))
    out = rfthpc("config", "validate", "--no-path-checks", "--config",
                 str(write(tmp_path, _with(base, "math_ruler_workflow"))))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert ("tasksets[0].default_workflow_type: workflow 'math_ruler_workflow' asks an auxiliary model (a judge or a "
            "reward model) and explorer.auxiliary_models is empty; add one") in out.stderr
    msg = _error(write(tmp_path, _with(base, "math_trainable_ruler_workflow", ground_truth_probability="2")))
    assert "tasksets[0].workflow_args.ground_truth_probability: 2; use a number from 0 to 1" in msg
    msg = _error(write(tmp_path, _judged(_with(base, "math_trainable_ruler_workflow", judge_model="judge"))))
    assert "workflow_args: 'judge_model' not used by workflow 'math_trainable_ruler_workflow'" in msg


DAPO_ARGS = "{enable_overlong_penalty: true, penalty_factor: 0.5, max_response_length: 32, cache_length: 8}"


def _dapo(config: str, where: str = "reward_fn_args", args: str = DAPO_ARGS, workflow: str = "math_boxed_workflow"
          ) -> str:
    """`config` with Trinity's DAPO example's workflow and reward, and its overlong settings in `where`."""
    text = config.replace("default_workflow_type: math_workflow",
                          f"default_workflow_type: {workflow}\n    default_reward_fn_type: math_dapo_reward")
    return text.replace("response_key: answer", f"response_key: answer\n      {where}: {args}")


def _second_taskset(config: str, group: str | None = None, extra: str = "") -> str:
    """One more taskset on the data of `config`, with `extra` YAML in it (in a new list `group`, else
    an entry of the list above), and the `default_workflow_type` line it goes before."""
    data = config.split("      path: ", 1)[1].split("\n", 1)[0]
    return (f"    {group}:\n" if group else "") + (
        f"    - name: u\n      path: {data}\n      format: {{prompt_key: question, response_key: answer}}\n"
        f"{extra}    default_workflow_type")


def test_trinity_overlong_settings_are_read_as_the_overlong_buffer(tmp_path: Path, base: str) -> None:
    for where, workflow in (("reward_fn_args", "math_boxed_workflow"), ("workflow_args", "math_dapo_workflow"),
                            ("workflow_args", "math_boxed_workflow")):
        loaded = load_config(write(tmp_path, _dapo(base, where, workflow=workflow)))
        ob = loaded.config.algorithm.overlong_buffer
        assert (ob.enable, ob.len, ob.penalty_factor) == (True, 8, 0.5)
        ts = loaded.config.buffer.explorer_input.tasksets[0]
        assert ts.reward_fn_args == {} and ts.workflow_args == {}
        key = f"buffer.explorer_input.taskset.{where}"
        assert {(m.target, m.value, m.source, m.framework) for m in loaded.mapped} == {
            ("algorithm.overlong_buffer.enable", True, f"{key}.enable_overlong_penalty", "Trinity-RFT"),
            ("algorithm.overlong_buffer.len", 8, f"{key}.cache_length", "Trinity-RFT"),
            ("algorithm.overlong_buffer.penalty_factor", 0.5, f"{key}.penalty_factor", "Trinity-RFT")}
        assert f"{key}.max_response_length: ignored: the overlong penalty's limit, which in rfthpc is " \
               "model.max_response_tokens, the longest response generated" in loaded.notes


def test_trinity_overlong_penalty_off_leaves_the_rest_ignored(tmp_path: Path, base: str) -> None:
    text = _dapo(base, "workflow_args", "{use_base: true, enable_overlong_penalty: false, cache_length: 8}",
                 "math_dapo_workflow")
    loaded = load_config(write(tmp_path, text.replace("algorithm_type: grpo", "algorithm_type: dapo")))
    assert loaded.config.algorithm.overlong_buffer.enable is False  # over the dapo preset's, as in Trinity
    assert ("buffer.explorer_input.taskset.workflow_args.cache_length: ignored: read only with "
            "enable_overlong_penalty: true") in loaded.notes


def test_an_explicit_overlong_buffer_wins_with_a_note(tmp_path: Path, base: str) -> None:
    text = _dapo(base).replace("  repeat_times: 4\n", "  repeat_times: 4\n  overlong_buffer: {len: 16}\n")
    loaded = load_config(write(tmp_path, text))
    assert loaded.config.algorithm.overlong_buffer.len == 16
    assert ("buffer.explorer_input.taskset.reward_fn_args.cache_length: 8 is not used: the config sets "
            "algorithm.overlong_buffer.len: 16") in loaded.notes
    assert "algorithm.overlong_buffer.len" not in {m.target for m in loaded.mapped}


def test_trinity_overlong_settings_rfthpc_cannot_follow_are_refused_once(tmp_path: Path, base: str) -> None:
    """Another limit than model.max_response_tokens, and training tasksets with different penalties;
    each named once, not again as arguments the reward does not take."""
    msg = _error(write(tmp_path, _dapo(base, args=DAPO_ARGS.replace("max_response_length: 32",
                                                                     "max_response_length: 20480"))))
    [line] = [ln for ln in msg.splitlines() if "max_response_length" in ln]
    assert line == ("  - buffer.explorer_input.taskset.reward_fn_args.max_response_length: Trinity-RFT key not "
                    "supported by rfthpc: the overlong penalty's limit, 20480 tokens, differs from "
                    "model.max_response_tokens (32), the longest response generated, up to which rfthpc measures "
                    "the penalty; set max_response_length to 32 (or model.max_response_tokens to 20480)")
    assert msg.splitlines()[0].endswith(": 1 problem")
    listed = _dapo(base).replace("    taskset:\n      name: t\n", "    tasksets:\n    - name: t\n")
    msg = _error(write(tmp_path, listed.replace("    default_workflow_type", _second_taskset(base))))
    assert ("buffer.explorer_input.tasksets[0].reward_fn_args.enable_overlong_penalty: Trinity-RFT key not supported "
            "by rfthpc: rfthpc's overlong penalty (algorithm.overlong_buffer) is one setting for every training "
            "taskset, and the training tasksets' penalties differ: give each the same settings") in msg


def test_an_eval_tasksets_overlong_settings_are_ignored(tmp_path: Path, base: str) -> None:
    eval_taskset = _second_taskset(base, "eval_tasksets", "      default_reward_fn_type: math_dapo_reward\n"
                                   f"      reward_fn_args: {DAPO_ARGS}\n")
    loaded = load_config(write(tmp_path, base.replace("    default_workflow_type", eval_taskset)))
    assert loaded.config.algorithm.overlong_buffer.enable is None
    [note] = [n for n in loaded.notes if "eval_tasksets[0].reward_fn_args.enable_overlong_penalty" in n]
    assert note.endswith("ignored: rfthpc's overlong penalty (algorithm.overlong_buffer) shapes the rewards trained "
                         "on; evaluations report the reward function's own score")


def test_rm_gallery_reward_is_named_as_not_part_of_rfthpc(tmp_path: Path, base: str) -> None:
    text = base.replace("default_workflow_type: math_workflow",
                        "default_workflow_type: math_workflow\n    default_reward_fn_type: rm_gallery_reward")
    msg = _error(write(tmp_path, text))
    assert "default_reward_fn_type: 'rm_gallery_reward' calls RM-Gallery, which is not part of rfthpc" in msg


@pytest.mark.parametrize(("workflow", "reward", "why"), [
    ("math_rm_workflow", "trajectory_accuracy_grader_reward",
     "is one of Trinity-RFT's OpenJudge graders, which ask a judge model behind an outside OpenAI-compatible API"),
    ("step_wise_alfworld_workflow", None, "plays ALFWorld (household tasks in TextWorld), a simulator"),
    ("intercode_sql_workflow", None, "runs each SQL query in InterCode's MySQL environment, a Docker container"),
])
def test_trinity_names_that_need_an_outside_service_are_refused_with_the_alternative(
        tmp_path: Path, base: str, workflow: str, reward: str | None, why: str) -> None:
    msg = _error(write(tmp_path, _with(base, workflow, reward)))
    key, name = ("default_reward_fn_type", reward) if reward else ("default_workflow_type", workflow)
    assert f"refused features:\n  - buffer.explorer_input.tasksets[0].{key}: {name!r} {why}" in msg, msg
    assert ("auxiliary model" if reward else "module:function workflow") in msg
    assert len(msg.splitlines()) == 3, msg  # one round: nothing else to fix first


def test_rlcr_reward_takes_its_weights_and_a_misspelt_argument_is_refused(tmp_path: Path, base: str) -> None:
    """Trinity's RLCR example: math_workflow scored by rlcr_reward with the five weights."""
    weights = "{format: 0.5, accuracy: 0.5, brier: 0.5, mean_confidence: 1.0e-5, confidence_one_or_zero: 1.0e-5}"
    rlcr = _with(base, "math_workflow", "rlcr_reward")
    loaded = load_config(write(tmp_path, rlcr.replace(
        "response_key: answer", f"response_key: answer\n      reward_fn_args: {{weights: {weights}}}")))
    assert loaded.config.buffer.explorer_input.tasksets[0].reward_fn_args["weights"]["brier"] == 0.5
    msg = _error(write(tmp_path, rlcr.replace("response_key: answer",
                                              f"response_key: answer\n      reward_fn_args: {{weight: {weights}}}")))
    assert "reward_fn_args ['weight'] are not parameters of reward function 'rlcr_reward'" in msg


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


def test_trinity_async_workflows_are_the_synchronous_ones_under_their_own_names(tmp_path: Path, base: str) -> None:
    """Trinity's AsyncMathWorkflow is MathWorkflow (its prompts, its reward) called asynchronously."""
    from rfthpc.workflows.registry import WORKFLOWS

    assert WORKFLOWS.get("async_math_workflow") is WORKFLOWS.get("math_workflow")
    assert WORKFLOWS.get("async_simple_workflow") is WORKFLOWS.get("simple_workflow")
    loaded = load_config(write(tmp_path, _with(base, "async_math_workflow")))
    assert loaded.config.buffer.explorer_input.tasksets[0].default_workflow_type == "async_math_workflow"
    assert loaded.mapped == []
