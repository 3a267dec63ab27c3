"""Trinity-RFT's current names and forms of keys rfthpc has: read as Trinity-RFT and veRL read them,
or refused with an error that names the alternative."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

from rfthpc.cli import main
from rfthpc.config import load_config
from rfthpc.config.settings import explorer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write

BASE = """
project: p
name: n
algorithm:
  algorithm_type: grpo
  repeat_times: 4
model:
  model_path: {model}
  max_prompt_tokens: 64
  max_response_tokens: 32
buffer:
  batch_size: 4
  explorer_input:
    taskset:
      name: t
      path: {data}
      format:
        prompt_key: question
        response_key: answer
"""


@pytest.fixture
def base(tmp_path: Path) -> str:
    (tmp_path / "model").mkdir()
    (tmp_path / "data.jsonl").write_text('{"question": "1+1", "answer": "#### 2"}\n')
    return textwrap.dedent(BASE).format(model=tmp_path / "model", data=tmp_path / "data.jsonl")


def _taskset(base: str, extra: str) -> str:
    """`base` with `extra` (YAML at the taskset's indentation) added to its taskset."""
    return base.replace("      name: t\n", "      name: t\n" + textwrap.indent(textwrap.dedent(extra), "      "))


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path)
    return str(e.value)


# data_selector ----------------------------------------------------------------------------------

def test_data_selector_is_read_as_task_selector(tmp_path: Path, base: str) -> None:
    cfg = write(tmp_path, _taskset(base, "data_selector:\n  selector_type: shuffle\n  seed: 7\n"))
    selector = load_config(cfg).config.buffer.explorer_input.tasksets[0].task_selector
    assert (selector.selector_type, selector.seed) == ("shuffle", 7)


def test_data_selector_in_tasksets_lists(tmp_path: Path, base: str) -> None:
    text = base.replace("    taskset:\n      name: t\n",
                        "    tasksets:\n    - name: t\n      data_selector: {selector_type: shuffle}\n")
    assert load_config(write(tmp_path, text)).config.buffer.explorer_input.tasksets[0].task_selector.selector_type \
        == "shuffle"
    evals = text + "    eval_tasksets:\n    - name: e\n      path: x\n      data_selector: {selector_type: shuffle}\n"
    assert "eval_tasksets[0].task_selector: 'shuffle' has no effect" in _error(write(tmp_path, evals))


def test_data_selector_in_a_stage(tmp_path: Path, base: str) -> None:
    text = _taskset(base, "data_selector: {selector_type: shuffle}\n") + textwrap.dedent("""
        stages:
        - stage_name: a
        - stage_name: b
          buffer:
            explorer_input:
              taskset:
                data_selector: {selector_type: sequential}
        """)
    stages = load_config(write(tmp_path, text)).stages
    assert [s.config.buffer.explorer_input.tasksets[0].task_selector.selector_type for s in stages] == [
        "shuffle", "sequential"]


def test_same_selector_under_both_names_is_accepted(tmp_path: Path, base: str) -> None:
    cfg = write(tmp_path, _taskset(base, """\
        task_selector: {selector_type: shuffle, seed: 42}
        data_selector: {selector_type: shuffle}
        """))
    assert load_config(cfg).config.buffer.explorer_input.tasksets[0].task_selector.selector_type == "shuffle"


def test_different_selectors_under_both_names_are_an_error(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, _taskset(base, """\
        task_selector: {selector_type: shuffle}
        data_selector: {selector_type: sequential}
        """)))
    assert "buffer.explorer_input.taskset: task_selector" in msg
    assert "differ" in msg and "keep one" in msg


@pytest.mark.parametrize(("kind", "alternative"), [
    ("random", "selector_type: shuffle"), ("offline_easy2hard", "selector_type: sequential"),
    ("difficulty_based", "selector_type: shuffle"),
])
def test_trinity_selectors_rfthpc_lacks_name_the_alternative(tmp_path: Path, base: str, kind: str,
                                                              alternative: str) -> None:
    msg = _error(write(tmp_path, _taskset(base, f"data_selector: {{selector_type: {kind}}}\n")))
    assert f"buffer.explorer_input.taskset.data_selector.selector_type: {kind!r} is not one of rfthpc's" in msg
    assert alternative in msg


def test_estimator_keys_empty_are_accepted_and_set_are_an_error(tmp_path: Path, base: str) -> None:
    empty = _taskset(base, "data_selector: {selector_type: shuffle, feature_keys: [], kwargs: {}}\n")
    assert load_config(write(tmp_path, empty)).config.buffer.explorer_input.tasksets[0].task_selector.selector_type \
        == "shuffle"
    msg = _error(write(tmp_path, _taskset(base, "task_selector: {feature_keys: [difficulty]}\n")))
    assert "buffer.explorer_input.taskset.task_selector.feature_keys: read by Trinity-RFT's" in msg


# lr_scheduler_type -------------------------------------------------------------------------------

def _optimizer(base: str, extra: str) -> str:
    return base.replace("  repeat_times: 4\n", "  repeat_times: 4\n  optimizer:\n" + textwrap.indent(extra, "    "))


@pytest.mark.parametrize("key", ["lr_scheduler_type", "warmup_style"])
def test_scheduler_under_either_name(tmp_path: Path, base: str, key: str) -> None:
    opt = load_config(write(tmp_path, _optimizer(base, f"{key}: cosine\n"))).config.algorithm.optimizer
    assert opt.lr_scheduler_type == "cosine" and not hasattr(opt, "warmup_style")


def test_scheduler_override_under_either_name(tmp_path: Path, base: str) -> None:
    cfg = write(tmp_path, base)
    for flag in ("--algorithm.optimizer.lr_scheduler_type", "--algorithm.optimizer.warmup_style"):
        assert load_config(cfg, [flag, "cosine"]).config.algorithm.optimizer.lr_scheduler_type == "cosine"
    assert load_config(cfg, ["--algorithm.optimizer.warmup_style=cosine"]).config.algorithm.optimizer \
        .lr_scheduler_type == "cosine"


def test_scheduler_defaults_to_constant_and_names_may_agree(tmp_path: Path, base: str) -> None:
    assert load_config(write(tmp_path, base)).config.algorithm.optimizer.lr_scheduler_type == "constant"
    both = _optimizer(base, "lr_scheduler_type: cosine\nwarmup_style: cosine\n")
    assert load_config(write(tmp_path, both)).config.algorithm.optimizer.lr_scheduler_type == "cosine"


def test_scheduler_names_that_disagree_are_an_error(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, _optimizer(base, "lr_scheduler_type: cosine\nwarmup_style: constant\n")))
    assert "algorithm.optimizer: lr_scheduler_type (cosine) and warmup_style (constant) differ" in msg


def test_a_stage_overrides_the_scheduler_under_the_other_name(tmp_path: Path, base: str) -> None:
    text = _optimizer(base, "lr_scheduler_type: cosine\n") + textwrap.dedent("""
        stages:
        - stage_name: sft
          algorithm: {optimizer: {warmup_style: constant}}
        - stage_name: rft
        """)
    stages = load_config(write(tmp_path, text)).stages
    assert [s.config.algorithm.optimizer.lr_scheduler_type for s in stages] == ["constant", "cosine"]


def _verl(base: str, optim: str) -> str:
    return base + "trainer:\n  trainer_config:\n    actor_rollout_ref:\n      actor:\n        optim:\n" + \
        textwrap.indent(optim, "          ")


@pytest.mark.parametrize("key", ["lr_scheduler_type", "warmup_style"])
def test_verl_scheduler_is_mapped(tmp_path: Path, base: str, key: str) -> None:
    text = _verl(base, f"{key}: cosine\nmin_lr_ratio: 0.1\nlr_warmup_steps: 3\n")
    opt = load_config(write(tmp_path, text)).config.algorithm.optimizer
    assert (opt.lr_scheduler_type, opt.min_lr_ratio, opt.lr_warmup_steps) == ("cosine", 0.1, 3)


def test_verl_scheduler_names_that_disagree_are_an_error(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, _verl(base, "lr_scheduler_type: cosine\nwarmup_style: constant\n")))
    assert "lr_scheduler_type (cosine) and warmup_style (constant, its older name) differ" in msg


def test_rfthpc_scheduler_key_wins_over_verl(tmp_path: Path, base: str) -> None:
    text = _verl(_optimizer(base, "warmup_style: constant\n"), "lr_scheduler_type: cosine\n")
    assert load_config(write(tmp_path, text)).config.algorithm.optimizer.lr_scheduler_type == "constant"


def test_a_scheduler_rfthpc_lacks_is_an_error(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, _verl(base, "lr_scheduler_type: polynomial\n")))
    assert "algorithm.optimizer.lr_scheduler_type: 'polynomial' is not one of 'constant', 'cosine', 'linear'" in msg


# monitor_type: tensorboard ------------------------------------------------------------------------

def _tensorboard_installed(monkeypatch: pytest.MonkeyPatch, installed: bool) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (real("json") if installed else None) if name == "tensorboard"
                        else real(name, *a))


def test_tensorboard_is_a_monitor(tmp_path: Path, base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _tensorboard_installed(monkeypatch, True)
    cfg = write(tmp_path, base + "monitor:\n  monitor_type: tensorboard\n")
    assert load_config(cfg).config.monitor.monitor_type == ["tensorboard"]


def test_tensorboard_without_its_package_fails_validation_with_exit_2(
        tmp_path: Path, base: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _tensorboard_installed(monkeypatch, False)
    cfg = write(tmp_path, base + "monitor:\n  monitor_type: [console, tensorboard]\n")
    assert "monitor.monitor_type: tensorboard needs the tensorboard package" in _error(cfg)
    assert main(["config", "validate", "--config", str(cfg)]) == 2
    assert "`pip install tensorboard`" in capsys.readouterr().err


# explorer.env_vars --------------------------------------------------------------------------------

def test_env_vars_are_strings(tmp_path: Path, base: str) -> None:
    cfg = write(tmp_path, base + "explorer:\n  env_vars: {NCCL_DEBUG: INFO, OMP_NUM_THREADS: 4, RATIO: 0.5}\n")
    loaded = load_config(cfg)
    assert loaded.config.explorer.env_vars == {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4", "RATIO": "0.5"}
    assert dict(explorer_settings(loaded.stages).env_vars) == loaded.config.explorer.env_vars


@pytest.mark.parametrize(("env_vars", "expected"), [
    ("[A, B]", "explorer.env_vars: expected a mapping, got list"),
    ("{FLAG: true}", "explorer.env_vars.FLAG: expected a string, got True"),
    ("{UNSET: null}", "explorer.env_vars.UNSET: expected a string, got None"),
    ("{MY-VAR: x}", "explorer.env_vars.MY-VAR: not an environment variable name"),
    ("{HF_TOKEN: x}", "explorer.env_vars.HF_TOKEN: a credential would be stored"),
])
def test_bad_env_vars(tmp_path: Path, base: str, env_vars: str, expected: str) -> None:
    assert expected in _error(write(tmp_path, base + f"explorer:\n  env_vars: {env_vars}\n"))


def test_env_vars_are_set_for_the_whole_run(tmp_path: Path, base: str) -> None:
    text = base + textwrap.dedent("""
        stages:
        - stage_name: a
        - stage_name: b
          explorer: {env_vars: {A: "1"}}
        """)
    assert "stage 'b': explorer.env_vars differ from those of stage 'a'" in _error(write(tmp_path, text))


# explorer.max_repeat_times_per_runner -------------------------------------------------------------

def test_max_repeat_times_per_runner_is_accepted(tmp_path: Path, base: str) -> None:
    loaded = load_config(write(tmp_path, base + "explorer:\n  max_repeat_times_per_runner: 2\n"))
    assert explorer_settings(loaded.stages).max_repeat_times_per_runner == 2
    assert explorer_settings(load_config(write(tmp_path, base)).stages).max_repeat_times_per_runner is None


def test_max_repeat_times_per_runner_below_one_is_an_error(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base + "explorer:\n  max_repeat_times_per_runner: 0\n"))
    assert "explorer.max_repeat_times_per_runner: 0 must be >= 1" in msg


# values Trinity-RFT saves ---------------------------------------------------------------------------

def test_the_optimizer_and_sample_strategy_trinity_saves_are_read_as_rfthpcs(tmp_path: Path, base: str) -> None:
    text = base.replace("  repeat_times: 4\n", "  repeat_times: 4\n  sample_strategy: warmup\n"
                        "  optimizer:\n    optimizer_type: adam\n    lr: 1.0e-6\n")
    text += "stages:\n  - stage_name: rft\n    algorithm:\n      optimizer:\n        optimizer_type: AdamW\n"
    loaded = load_config(write(tmp_path, text))
    stage = loaded.stages[0].config.algorithm
    assert (stage.sample_strategy, stage.optimizer.optimizer_type, stage.optimizer.lr) == ("default", "adamw", 1e-6)
    sources = {(m.target, m.value) for m in loaded.mapped}
    assert ("algorithm.optimizer.optimizer_type", "adamw") in sources
    assert ("stages[0].algorithm.optimizer.optimizer_type", "adamw") in sources
    assert ("algorithm.sample_strategy", "default") in sources


def test_other_sample_strategies_are_still_refused(tmp_path: Path, base: str) -> None:
    text = base.replace("  repeat_times: 4\n", "  repeat_times: 4\n  sample_strategy: staleness_control\n")
    assert "algorithm.sample_strategy" in _error(write(tmp_path, text))
