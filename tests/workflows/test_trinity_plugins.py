"""Trinity-RFT plugin workflows named by module path (`default_workflow_type: pkg.module.Class`) run: each
episode builds the plugin on rfthpc's implementation of Trinity's workflow API in a process of its own and
talks to the policy through the explorer's endpoint; the calls it returns are the episode's steps, with the
tokens the endpoint recorded and the rewards the plugin set. A policy scripted here makes the path known."""

from __future__ import annotations

from typing import Any

import pytest

from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import ConfigError
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import EPISODE, STATE, STEP, STEP_REWARD, needs_of
from rfthpc.workflows.registry import WORKFLOWS, run_workflow
from tests.workflows.conftest import ScriptedEngine, context

PLUGINS = "tests.workflows.trinity_plugins"


def plugin_task(name: str, repeat: int = 2, **workflow_args: Any) -> Task:
    return Task(task_id="plus/0", taskset="plus", index=0, raw={"question": "2 + 2?", "answer": 4}, prompt=None,
                truth=None, workflow=f"{PLUGINS}.{name}", reward_fn=None,
                workflow_args={"timeout_s": 120, **workflow_args},
                rollout_args=SamplingArgs(temperature=1.0, max_tokens=12), repeat_times=repeat)


def test_a_chat_plugin_trains_each_call_with_the_reward_it_set(tokenizer) -> None:
    """`model.chat(messages, n=2)`: two calls per episode, each an experience with the recorded tokens and the
    plugin's reward (the reply holding the answer scores 1)."""
    engine = ScriptedEngine(tokenizer, lambda ctx: "it is 4" if len(engine.calls) % 2 else "it is 5")
    result = run_workflow(plugin_task("PlusChatWorkflow"), context(engine, tokenizer))
    assert result.info["failed_episodes"] == 0
    assert [(e.info[EPISODE], e.info[STEP]) for e in result.experiences] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    by_text = {e.response_text: e.reward for e in result.experiences}
    assert by_text == {"it is 4": 1.0, "it is 5": 0.0}
    for e in result.experiences:
        assert tokenizer.decode(e.response_token_ids, skip_special_tokens=True) == e.response_text
        assert e.logprobs == [ScriptedEngine.LOGPROB] * len(e.response_token_ids)
        assert "2 + 2?" in tokenizer.decode(e.prompt_token_ids)


def test_an_async_plugin_trains_only_the_calls_it_returns(tokenizer) -> None:
    """An asynchronous plugin with an OpenAI client and `extract_experience_from_history`: of its two calls it
    returns the second, which alone is trained, with the reward it set from workflow_args."""
    engine = ScriptedEngine(tokenizer, lambda ctx: "ok")
    result = run_workflow(plugin_task("TwoCallAsyncWorkflow", repeat=1, bonus=0.5), context(engine, tokenizer))
    assert result.info["failed_episodes"] == 0
    [step] = result.experiences
    assert (step.info[STEP], step.info["calls"], step.reward) == (1, 2, 0.5)
    assert "answer" in tokenizer.decode(step.prompt_token_ids)


def test_a_step_wise_plugin_gives_gigpo_each_steps_earnings_and_state(tokenizer) -> None:
    """A plugin's experiences carry to the steps what Trinity's GiGPO reads from their info: `step_reward` and
    `env_state_hash` (rfthpc's STEP_REWARD and STATE); each step's reward is the one it set."""
    engine = ScriptedEngine(tokenizer, lambda ctx: "ok")
    result = run_workflow(plugin_task("StepWiseGiGPOWorkflow", repeat=1), context(engine, tokenizer))
    assert [(e.info[STEP], e.reward, e.info[STEP_REWARD], e.info[STATE]) for e in result.experiences] == [
        (0, 1.0, 0.0, "hash-a"), (1, 1.0, 1.0, "hash-b")]
    plain = run_workflow(plugin_task("PlusChatWorkflow", repeat=1), context(engine, tokenizer))
    assert all(STEP_REWARD not in e.info and STATE not in e.info for e in plain.experiences)


def test_a_plugin_that_sets_no_reward_fails_its_episodes_naming_it(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "hello")
    result = run_workflow(plugin_task("ForgetfulWorkflow", repeat=1), context(engine, tokenizer))
    assert result.experiences == [] and result.info["failed_episodes"] == 1
    assert "ForgetfulWorkflow left the reward of call 0 at None" in result.info["agent_error"]


def test_a_plugin_is_imported_at_validation(tmp_path) -> None:
    """The plugin is imported where it will run (its interpreter, rfthpc's trinity first on the path): a missing
    class or module is named before anything starts; its own workflow_args are not rfthpc's to refuse."""
    fn = WORKFLOWS.get(f"{PLUGINS}.PlusChatWorkflow")
    assert needs_of(fn).problems(f"{PLUGINS}.PlusChatWorkflow", {"env_max_steps": 8}, None, False) == []
    missing = f"{PLUGINS}.NoSuchWorkflow"
    [problem] = needs_of(WORKFLOWS.get(missing)).problems(missing, {}, None, False)
    assert "has no callable 'NoSuchWorkflow'" in problem
    [problem] = needs_of(fn).problems(f"{PLUGINS}.PlusChatWorkflow", {"python": str(tmp_path / "none")}, None, False)
    assert "no such interpreter" in problem
    with pytest.raises(ConfigError, match="unknown workflow 'plus_chat'"):
        WORKFLOWS.get("plus_chat")


def test_an_agentscope_plugin_runs_in_its_interpreter(tokenizer, agentscope_python: str) -> None:
    """The form of Trinity's AgentScope FrozenLake plugin: AgentScope's OpenAIChatModel on the model's async
    client, in the AgentScope interpreter (`workflow_args.python`); each turn a step, the reward the plugin set."""
    def policy(context: list[int]) -> str:
        seen = tokenizer.decode(context)
        return "9" if "say 9" in seen else "7"  # right at 9, wrong at 8

    engine = ScriptedEngine(tokenizer, policy)
    task = Task(task_id="count/0", taskset="count", index=0, raw={"start": 9}, prompt=None, truth=None,
                workflow="tests.workflows.trinity_plugins_agentscope.CountdownWorkflow", reward_fn=None,
                workflow_args={"python": agentscope_python, "turns": 2, "timeout_s": 240},
                rollout_args=SamplingArgs(temperature=1.0, max_tokens=8), repeat_times=1)
    result = run_workflow(task, context(engine, tokenizer))
    assert result.info["failed_episodes"] == 0, result.info
    assert [(e.info[STEP], e.reward) for e in result.experiences] == [(0, 0.0), (1, 0.0)]
    assert "say 8" in tokenizer.decode(result.experiences[1].prompt_token_ids)
    engine.script = lambda context: "9" if "say 9" in tokenizer.decode(context) else "8"
    result = run_workflow(task, context(engine, tokenizer))
    assert [e.reward for e in result.experiences] == [1.0, 1.0]
