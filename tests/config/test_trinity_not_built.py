"""Trinity-RFT names rfthpc has not built yet (rfthpc/not_built.py): each refusal is one line saying that it
is a Trinity-RFT name not built yet, what the feature is, and the closest working alternative in rfthpc."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.algorithms.registry import POLICY_LOSS_FNS
from rfthpc.config import load_config
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import _error, base  # noqa: F401  (fixture)

_ALGORITHM = "algorithm.algorithm_type"
_TASKSET = "buffer.explorer_input.tasksets[0].default_workflow_type"
_REWARD = "buffer.explorer_input.tasksets[0].default_reward_fn_type"
_TEACHER = "algorithm_type: on_policy_distill with the taskset's own workflow"


def _set(config: str, key: str, value: str) -> str:
    """`config` with `key` set to `value`: the algorithm, another `algorithm.*` key, or the taskset's workflow or
    reward function."""
    if key == _ALGORITHM:
        return config.replace("algorithm_type: grpo", f"algorithm_type: {value}")
    if key == _TASKSET:
        return config.replace("default_workflow_type: math_workflow", f"default_workflow_type: {value}")
    if key == _REWARD:
        return config.replace("default_workflow_type: math_workflow",
                              f"default_workflow_type: math_workflow\n    default_reward_fn_type: {value}")
    return config.replace("repeat_times: 4", f"repeat_times: 4\n  {key.removeprefix('algorithm.')}: {value}")


@pytest.mark.parametrize(("key", "name", "kind", "feature", "instead"), [
    ("algorithm.advantage_fn", "clipv", "advantage function", "(Clip_V)", "advantage_fn: clipb"),
    ("algorithm.policy_loss_fn", "sft_phi", "policy loss", "CHORD's SFT loss weighted by p(1-p) per token, as an SFT "
     "stage's loss", "policy_loss_fn: sft (unweighted) for an sft stage"),
    (_TASKSET, "on_policy_distill_workflow", "workflow", "asks a teacher (an auxiliary model) for its "
     "log-probability", _TEACHER),
    (_TASKSET, "agentscope_reactv2_math_workflow", "workflow", "runs a ReAct agent written for AgentScope 0.x",
     "agentscope_react_math_workflow (the same math agent with a Python tool, on AgentScope 1.x)"),
    (_TASKSET, "RAFT_baseline_countdown_workflow", "workflow", "RAFT baseline on Countdown",
     "math_workflow with default_reward_fn_type: countdown_reward"),
    (_TASKSET, "RAFT_baseline_dapo_workflow", "workflow", "RAFT baseline on DAPO-Math", "math_dapo_workflow"),
    (_TASKSET, "bots_math_boxed_workflow", "workflow", "BOTS's math_boxed_workflow",
     "math_boxed_workflow with the taskset's prompt_type: messages"),
    (_TASKSET, "learn2ask_workflow", "workflow", "(Learn2Ask)", "rubric_judge_workflow"),
    (_TASKSET, "medicine_ruler_workflow", "workflow", "as RULER does", "math_ruler_workflow"),
])
def test_a_trinity_name_not_built_yet_says_what_it_is_and_what_comes_closest(
        tmp_path: Path, base: str, key: str, name: str, kind: str, feature: str, instead: str) -> None:  # noqa: F811
    msg = _error(write(tmp_path, _set(base, key, name)))
    assert f"refused features:\n  - {key}: {name!r} is a Trinity-RFT {kind} that rfthpc has not built yet: it " in msg
    assert feature in msg and f"; closest in rfthpc: {instead}" in msg, msg
    assert len(msg.splitlines()) == 3, msg  # one line, and nothing else to fix first


@pytest.mark.parametrize(("key", "base_class", "port"), [
    ("algorithm.policy_loss_fn", "PolicyLossFn", "write it as an rfthpc policy loss and name that as "
     "'module:function'"),
    (_ALGORITHM, "AlgorithmType", "choose the closest built-in algorithm_type"),
    ("algorithm.kl_loss_fn", "KLFn", "write it as an rfthpc KL estimator and name that as 'module:function'"),
    (_REWARD, "RewardFn", "write it as an rfthpc reward function and name that as 'module:function'"),
])
def test_a_trinity_plugin_class_named_by_its_module_path_is_refused_with_how_to_port_it(
        tmp_path: Path, base: str, key: str, base_class: str, port: str) -> None:  # noqa: F811
    name = "examples.my_plugin.module.MyClass"
    msg = _error(write(tmp_path, _set(base, key, name)))
    assert (f"  - {key}: {name!r} names a Trinity-RFT plugin class by its module path; rfthpc has not built it and "
            f"cannot run Trinity-RFT's classes (a subclass of its {base_class}, importing trinity): {port}") in msg
    assert len(msg.splitlines()) == 3, msg


def test_a_trinity_plugin_workflow_is_imported_at_validation(tmp_path: Path, base: str) -> None:  # noqa: F811
    """A plugin workflow runs (rfthpc.workflows.trinity_plugin): validation imports it where it will run, so
    one that cannot be imported is named before anything starts, and one that can validates."""
    msg = _error(write(tmp_path, _set(base, _TASKSET, "examples.my_plugin.module.MyClass")))
    assert "tasksets[0].default_workflow_type: cannot import module 'examples.my_plugin.module'" in msg, msg
    plugin = _set(base, _TASKSET, "tests.workflows.trinity_plugins.PlusChatWorkflow")
    assert load_config(write(tmp_path, plugin)).config is not None


def test_a_name_not_built_is_refused_where_a_registry_is_asked_outside_validation() -> None:
    with pytest.raises(ConfigError, match=r"^algorithm.policy_loss_fn: 'sft_phi' is a Trinity-RFT policy loss "
                                          r"that rfthpc has not built yet: it is CHORD's SFT loss"):
        POLICY_LOSS_FNS.get("sft_phi")


def test_the_alternative_named_for_clipv_loads(tmp_path: Path, base: str) -> None:  # noqa: F811
    clipb = base.replace("repeat_times: 4", "repeat_times: 4\n  advantage_fn: clipb")
    assert load_config(write(tmp_path, clipb)).config.algorithm.advantage_fn == "clipb"


def test_trinitys_raft_loads_as_the_sft_loss_on_each_groups_best(tmp_path: Path, base: str) -> None:  # noqa: F811
    alg = load_config(write(tmp_path, _set(base, _ALGORITHM, "raft"))).config.algorithm
    assert (alg.advantage_fn, alg.policy_loss_fn, alg.kl_loss_fn) == ("raft", "sft", "none")
    bad = _set(base, _ALGORITHM, "raft").replace("repeat_times: 4", "repeat_times: 4\n  advantage_fn_args: {top_k: 0}")
    assert "algorithm.advantage_fn_args.top_k must be a whole number >= 1" in _error(write(tmp_path, bad))


def test_auxiliary_buffers_without_a_mix_are_refused_naming_the_mix(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + "  trainer_input:\n    auxiliary_buffers:\n      sft: {path: /data/expert}\n"
    assert ("buffer.trainer_input.auxiliary_buffers: ['sft'] are read only by algorithm.sample_strategy mix (with "
            "policy loss mix or mix_chord, or algorithm_type mix or mix_chord)") in _error(write(tmp_path, text))


@pytest.mark.parametrize(("name", "why"), [
    ("alfworld_workflow_v2", "plays ALFWorld"),
    ("RAFT_baseline_alfworld_workflow", "plays ALFWorld"),
    ("RAFT_baseline_scienceworld_workflow", "plays ScienceWorld"),
    ("RAFT_baseline_webshop_workflow", "plays WebShop"),
    ("simple_mm_workflow", "images and videos (multimodal data) are not supported"),
    ("agentopia_workflow", "runs an AgentOpia agent in AppWorld"),
    ("bcp_simple_react_workflow", "searching its document index"),
])
def test_trinity_workflows_that_need_what_rfthpc_does_not_ship_say_so(tmp_path: Path, base: str, name: str,  # noqa: F811
                                                                       why: str) -> None:
    msg = _error(write(tmp_path, _set(base, _TASKSET, name)))
    assert f"refused features:\n  - {_TASKSET}: {name!r} " in msg and why in msg and "known:" not in msg, msg


def test_on_policy_distill_needs_a_teacher_with_the_policys_tokenizer(tmp_path: Path, base: str) -> None:  # noqa: F811
    distill = _set(base, _ALGORITHM, "on_policy_distill")
    assert ("model.teacher_model_path: missing; algorithm.advantage_fn 'on_policy_distill' scores the samples with "
            "a teacher model") in _error(write(tmp_path, distill))
    stray = base.replace("model:\n", "model:\n  teacher_model_path: /models/teacher\n", 1)
    assert ("model.teacher_model_path: '/models/teacher' is read only by an advantage that scores with a teacher, "
            "and no stage has one") in _error(write(tmp_path, stray))
