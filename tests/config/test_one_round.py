"""A config with problems in every phase of loading gets all of them in one error, grouped by kind: a
user fixes a file in one round, not one round per phase."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]

# One problem per phase: ROLL's keys, veRL's keys, typed reading (unknown key, refused key, wrong
# type), then the checks of the finalized config (algorithm, workflow, GPUs, paths).
PROBLEMS = {
    "async_generation_ratio: 0.5\n": "async_generation_ratio: 0.5; use a whole number >= 0",
    "trainr: {}\n": "trainr: unknown key; did you mean 'trainer'?",
    "trainer:\n  fix_actor_microbatch_loss_scale: true\n  trainer_config:\n    actor_rollout_ref:\n      actor:\n"
    "        ppo_micro_batch_size_per_gpus: 2\n":
        "trainer.fix_actor_microbatch_loss_scale: Trinity-RFT key not supported by rfthpc",
    "explorer:\n  rollout_model:\n    engine_num: 2\n    tensor_parallel_size: 2\n":
        "need 4 GPUs, more than the cluster's 1 x 2 = 2",
}
EDITS = {
    ("batch_size: 4", "batch_size: four"): "buffer.batch_size: expected an integer, got 'four'",
    ("repeat_times: 4", "repeat_times: 4\n  advantage_fn: gae2"): "algorithm.advantage_fn: unknown",
    ("default_workflow_type: math_workflow", "default_workflow_type: maths_workflow"):
        "default_workflow_type: unknown workflow 'maths_workflow'",
    ("model_path: {model}", "model_path: {model}/nope"): "model.model_path: ",
}


def _everything_wrong(tmp_path: Path, base: str) -> Path:  # noqa: F811
    text = base
    for old, new in EDITS:
        model = base.split("model_path: ", 1)[1].split("\n", 1)[0]
        text = text.replace(old.format(model=model), new.format(model=model))
    return write(tmp_path, text + "".join(PROBLEMS))


def test_every_phase_reports_in_one_error_grouped_by_kind(tmp_path: Path, base: str) -> None:  # noqa: F811
    with pytest.raises(ConfigError) as e:
        load_config(_everything_wrong(tmp_path, base))
    msg = str(e.value)
    for expected in [*PROBLEMS.values(), *EDITS.values()]:
        assert expected in msg, expected
    assert "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpus: unknown veRL key" in msg
    headers = [line[:-1] for line in msg.splitlines() if not line.startswith(" ") and line.endswith(":")]
    assert headers == ["unknown keys", "refused features", "invalid values", "algorithm", "workflow and reward",
                       "GPU budget", "paths and datasets"]
    first, *_ = msg.splitlines()
    assert first.startswith("invalid config (") and first.endswith(" problems")
    assert msg.splitlines()[-1].startswith("(the checks after reading ran on the rest of the config")


def test_the_command_line_gives_all_of_them_and_exit_code_2(tmp_path: Path, base: str) -> None:  # noqa: F811
    out = subprocess.run([sys.executable, "-m", "rfthpc", "config", "validate", "--config",
                          str(_everything_wrong(tmp_path, base))], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    for expected in [*PROBLEMS.values(), *EDITS.values()]:
        assert expected in out.stderr, expected


def test_a_stage_names_its_own_problems_and_a_run_problem_is_listed_once(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base.replace("max_prompt_tokens: 64", "max_prompt_tokens: 64\n  max_model_len: 80") + (
        "stages:\n"
        "  - stage_name: warm\n    algorithm:\n      policy_loss_fn: ppo2\n"
        "  - stage_name: rft\n    trainer:\n      save_intervall: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    lines = str(e.value).splitlines()
    # In both stages, from the run's own sections: once, without a stage.
    assert [ln for ln in lines if "exceed max_model_len (80)" in ln] == [
        ("  - model: max_prompt_tokens (64) + max_response_tokens (32) exceed max_model_len (80); lower one of them "
         "or raise max_model_len")]
    assert any(ln.startswith("  - stage 'warm': algorithm.policy_loss_fn: unknown") for ln in lines), lines
    assert any(ln.startswith("  - stage 'rft': trainer.save_intervall: unknown key; did you mean "
                             "'trainer.save_interval'?") for ln in lines), lines


def test_a_valid_config_still_loads_and_a_single_problem_reads_as_before(tmp_path: Path, base: str) -> None:  # noqa: F811
    assert load_config(write(tmp_path, base)).config.buffer.batch_size == 4
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, base + "monitr: {}\n"))
    assert str(e.value).splitlines() == [
        f"invalid config ({tmp_path / 'cfg.yaml'}): 1 problem", "unknown keys:",
        ("  - monitr: unknown key; did you mean 'monitor'? (valid keys here: project, name, mode, checkpoint_root_dir, "
         "continue_from_checkpoint, algorithm, model, cluster, buffer, explorer, synchronizer, trainer, monitor, "
         "stages, slurm, filesystem)")]


def _lines_naming(msg: str, text: str) -> list[str]:
    return [line for line in msg.splitlines() if text in line]


def test_a_refused_key_is_reported_once_under_one_kind(tmp_path: Path, base: str) -> None:  # noqa: F811
    """A refused selector, its estimator keys and a reward function rfthpc does not have are not also
    an invalid choice, unknown keys or an unknown function; an advantage function rfthpc has not built is refused,
    and not also an unknown function."""
    text = base.replace("      name: t\n", "      name: t\n      data_selector:\n        selector_type: difficulty_based\n"
                        "        feature_keys: [pass_rate]\n        kwargs: {m: 16}\n")
    text = text.replace("default_workflow_type: math_workflow",
                        "default_workflow_type: math_workflow\n    default_reward_fn_type: rm_gallery_reward")
    text = text.replace("repeat_times: 4", "repeat_times: 4\n  advantage_fn: clipv")
    msg = str(pytest.raises(ConfigError, load_config, write(tmp_path, text)).value)
    for key in ("selector_type", "feature_keys", "kwargs", "rm_gallery_reward"):
        [line] = _lines_naming(msg, key)
        assert line.startswith("  - buffer.explorer_input.taskset"), line
    headers = [line[:-1] for line in msg.splitlines() if not line.startswith(" ") and line.endswith(":")]
    assert headers == ["refused features"], msg
    assert "not set after the config was resolved" not in msg
    assert msg.splitlines()[0].endswith(": 5 problems")


def test_an_unset_environment_variable_is_one_problem_among_the_others(
        tmp_path: Path, base: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """`${oc.env:VAR}` without a default, VAR unset: a problem naming VAR and both fixes, in the same
    round as the rest; the value (and a value referring to it) is read as unset, which no later check
    reports again."""
    monkeypatch.delenv("RFTHPC_TEST_MODEL", raising=False)
    model = base.split("model_path: ", 1)[1].split("\n", 1)[0]
    text = base.replace(f"model_path: {model}", "model_path: ${oc.env:RFTHPC_TEST_MODEL}")
    text = text.replace("    default_workflow_type", "    eval_tasksets:\n    - name: e\n"
                        "      path: ${model.model_path}/eval.jsonl\n    default_workflow_type")
    path = write(tmp_path, text + "trainr: {}\n")
    msg = str(pytest.raises(ConfigError, load_config, path).value)
    assert ("  - model.model_path: '${oc.env:RFTHPC_TEST_MODEL}' reads the environment variable RFTHPC_TEST_MODEL, "
            "which is not set; export it (export RFTHPC_TEST_MODEL=...) or give the config a default: "
            "${oc.env:RFTHPC_TEST_MODEL,DEFAULT}") in msg.splitlines()
    assert "trainr: unknown key" in msg
    assert msg.splitlines()[0].endswith(": 2 problems"), msg
    out = subprocess.run([sys.executable, "-m", "rfthpc", "config", "validate", "--config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2 and "RFTHPC_TEST_MODEL" in out.stderr and "trainr" in out.stderr


def test_the_functions_of_an_unknown_algorithm_are_checked_under_its_kind(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base.replace("algorithm_type: grpo", "algorithm_type: no_such_algorithm\n  advantage_fn: no_such_fn")
    lines = str(pytest.raises(ConfigError, load_config, write(tmp_path, text)).value).splitlines()
    assert lines[0].endswith(": 2 problems") and lines[1] == "algorithm:", lines
    assert lines[2].startswith("  - algorithm.algorithm_type: unknown algorithm 'no_such_algorithm'")
    assert lines[3].startswith("  - algorithm.advantage_fn: unknown advantage function 'no_such_fn'")
