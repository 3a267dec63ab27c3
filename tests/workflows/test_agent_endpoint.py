"""The policy's OpenAI-compatible endpoint and `agent_workflow`: a real HTTP server on loopback, the `openai`
client as agents use it, the tiny model's engine. Every call is recorded exactly (the trainer's log-probs of a
multi-call episode equal the engine's within 1e-5), a request without the endpoint's key is refused, and an
agent that dies, hangs or raises fails its episode only."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from openai import OpenAI

from rfthpc.engines import make_engine
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.tasks.tasksets import PromptBuilder, Task
from rfthpc.workflows.base import EPISODE, STATE, STEP, STEP_REWARD
from rfthpc.workflows.endpoint import PolicyEndpoint
from rfthpc.workflows.registry import run_workflow
from tests.workflows.conftest import ScriptedEngine, context
from tests.workflows.test_env_workflow_engine import TOL, engine_settings, trainer_logprobs

AGENTS = "tests.workflows.agents"
ROOT = Path(__file__).resolve().parents[2]


def agent_task(agent: str, repeat: int = 2, **workflow_args) -> Task:
    return Task(task_id="q/0", taskset="q", index=0, raw={"prompt": "hello there"}, prompt="hello there", truth=None,
                workflow="agent_workflow", reward_fn=None,
                workflow_args={"agent": f"{AGENTS}:{agent}", **workflow_args},
                rollout_args=SamplingArgs(temperature=1.0, max_tokens=16), repeat_times=repeat)


def post(url: str, body: dict, key: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_multi_call_episode_is_recorded_exactly_as_the_trainer_scores_it(tiny_model: Path, tokenizer) -> None:
    engine = make_engine("transformers", engine_settings(tiny_model))
    endpoint = PolicyEndpoint(engine, PromptBuilder(tokenizer))
    try:
        episode, base_url = endpoint.open_episode(SamplingArgs(temperature=1.0, max_tokens=12))
        client = OpenAI(base_url=base_url, api_key=endpoint.key, max_retries=0)
        messages = [{"role": "user", "content": "count with me"}]
        for _ in range(3):
            text = client.chat.completions.create(model="policy", messages=messages).choices[0].message.content
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
            model="policy", messages=messages, stream=True) if chunk.choices)
        calls = endpoint.close_episode(episode)
    finally:
        endpoint.close()
        engine.close()
    assert len(calls) == 4 and calls[-1].text == streamed
    # Each call's prompt is the conversation as rendered for it: later calls' prompts hold the earlier turns.
    assert calls[0].prompt_ids == PromptBuilder(tokenizer).render(messages[:1])
    assert all(len(a.prompt_ids) < len(b.prompt_ids) for a, b in zip(calls, calls[1:]))
    from rfthpc.workflows.agent import episode_experiences

    experiences = episode_experiences(calls, [0.0, 0.0, 0.5, 1.0], 0)
    for exp, lp in zip(experiences, trainer_logprobs(tiny_model, experiences), strict=True):
        assert float((lp - torch.tensor(exp.logprobs)).abs().max()) <= TOL
    # Rewards given per call are each step's own (ROLL's step scores); one reward is the episode's.
    assert [e.info.get(STEP_REWARD) for e in experiences] == [0.0, 0.0, 0.5, 1.0]
    assert [STEP_REWARD in e.info for e in episode_experiences(calls, 1.0, 0)] == [False] * 4


def test_content_parts_read_as_their_text_and_a_stream_ends_with_its_usage_when_asked(tokenizer) -> None:
    """AgentScope's formatter sends every message's content as a list of text parts; OpenAI clients that ask for
    `stream_options.include_usage` read the usage from a last chunk without choices."""
    endpoint = PolicyEndpoint(ScriptedEngine(tokenizer, lambda ctx: "fine"), PromptBuilder(tokenizer))
    try:
        episode, base_url = endpoint.open_episode(SamplingArgs(max_tokens=8))
        client = OpenAI(base_url=base_url, api_key=endpoint.key, max_retries=0)
        parts = [{"role": "system", "content": [{"type": "text", "text": "be brief"}]},
                 {"role": "user", "content": [{"type": "text", "text": "how"}, {"type": "text", "text": "are you"}]}]
        client.chat.completions.create(model="policy", messages=parts)
        chunks = list(client.chat.completions.create(model="policy", messages=parts, stream=True,
                                                     stream_options={"include_usage": True}))
        image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
        status, reply = post(f"{base_url}/chat/completions", {"messages": image}, endpoint.key)
        calls = endpoint.close_episode(episode)
    finally:
        endpoint.close()
    text = PromptBuilder(tokenizer).render([{"role": "system", "content": "be brief"},
                                            {"role": "user", "content": "how\nare you"}])
    assert [c.prompt_ids for c in calls] == [text, text]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "fine"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == len(text)
    assert status == 400 and "reads text parts only" in reply["error"]["message"]


def test_the_endpoint_is_announced_once_and_published_in_the_run_directory(tmp_path: Path, tokenizer) -> None:
    """The explorer is told the endpoint's URL when it starts (not again for later tasks) and publishes it under
    `endpoints/`, a file per process naming its node and pid, removed when the process ends."""
    import dataclasses as dc
    import os
    import re

    from rfthpc.rundir.endpoints import publish_endpoint, read_endpoints, withdraw_endpoint

    announced: list[str] = []
    engine = ScriptedEngine(tokenizer, lambda ctx: "ok")
    ctx = dc.replace(context(engine, tokenizer), endpoint_started=announced.append)
    for _ in range(2):
        assert run_workflow(agent_task("chat_twice", repeat=1), ctx).info["failed_episodes"] == 0
    (url,) = announced
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
    path = publish_endpoint(tmp_path, "explorer", 3, url)
    (record,) = read_endpoints(tmp_path)
    assert (record["url"], record["explorer"], record["rank"], record["pid"]) == (url, "explorer", 3, os.getpid())
    withdraw_endpoint(path)
    assert read_endpoints(tmp_path) == []


def test_requests_without_the_key_or_outside_an_episode_are_refused(tokenizer) -> None:
    endpoint = PolicyEndpoint(ScriptedEngine(tokenizer, lambda ctx: "hi"), PromptBuilder(tokenizer))
    try:
        episode, base_url = endpoint.open_episode(SamplingArgs(max_tokens=8))
        body = {"model": "policy", "messages": [{"role": "user", "content": "x"}]}
        assert post(f"{base_url}/chat/completions", body, None)[0] == 401
        assert post(f"{base_url}/chat/completions", body, "not-the-key")[0] == 401
        status, reply = post(f"{base_url}/chat/completions", body, endpoint.key)
        assert status == 200 and reply["choices"][0]["message"]["content"] == "hi"
        assert reply["usage"]["completion_tokens"] == len(tokenizer.encode("hi", add_special_tokens=False)) + 1
        assert post(f"{base_url}/chat/completions", {"messages": "x"}, endpoint.key)[0] == 400
        assert len(endpoint.close_episode(episode)) == 1
        assert post(f"{base_url}/chat/completions", body, endpoint.key)[0] == 404  # the episode ended
    finally:
        endpoint.close()


def test_tool_calls_are_rendered_and_read_back(tokenizer) -> None:
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>'
    engine = ScriptedEngine(tokenizer, lambda ctx: call)
    endpoint = PolicyEndpoint(engine, PromptBuilder(tokenizer))
    tools = [{"type": "function", "function": {"name": "calculator", "description": "evaluates arithmetic",
                                               "parameters": {"type": "object", "properties": {
                                                   "expression": {"type": "string"}}}}}]
    try:
        # The tiny model's template ignores tools; Qwen's lists them in a system turn, as this one does.
        template = ("{%- if tools -%}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{%- endif -%}"
                    + tokenizer.chat_template)
        episode, base_url = endpoint.open_episode(SamplingArgs(max_tokens=400), chat_template=template)
        client = OpenAI(base_url=base_url, api_key=endpoint.key, max_retries=0)
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "2+3?"}],
                                               tools=tools)
        [made] = reply.choices[0].message.tool_calls
        assert reply.choices[0].finish_reason == "tool_calls"
        assert (made.function.name, json.loads(made.function.arguments)) == ("calculator", {"expression": "2+3"})
        # The tools reached the prompt the policy saw, as the chat template renders them.
        assert "calculator" in tokenizer.decode(engine.calls[0][0][0])
        endpoint.close_episode(episode)
    finally:
        endpoint.close()


def test_each_call_of_each_episode_is_an_experience_with_the_episodes_reward(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "fine")
    result = run_workflow(agent_task("chat_twice", repeat=3), context(engine, tokenizer))
    assert len(result.experiences) == 6 and result.info["failed_episodes"] == 0
    assert sorted((e.info[EPISODE], e.info[STEP]) for e in result.experiences) == [
        (e, k) for e in range(3) for k in range(2)]
    assert all(e.reward == 8.0 and e.loss_mask == [1] * len(e.response_token_ids) for e in result.experiences)
    per_call = run_workflow(agent_task("per_call_rewards", repeat=1), context(engine, tokenizer))
    assert [e.reward for e in per_call.experiences] == [0.25, 0.75]


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_an_agent_says_per_call_what_each_step_earned_and_the_state_it_acted_in(tokenizer, isolation: str) -> None:
    """A per-call mapping gives the call's reward, and its step reward and state where said (GiGPO's inputs);
    a mapping without a reward, or with keys of its own, fails its episode naming the form."""
    engine = ScriptedEngine(tokenizer, lambda ctx: "ok")
    outcomes = [{"reward": 1.0, "step_reward": 0.0, "state": "start"}, None, {"reward": 1.0, "state": 7}]
    result = run_workflow(agent_task("steps_with_states", repeat=1, isolation=isolation,
                                     agent_args={"outcomes": outcomes}), context(engine, tokenizer))
    assert [(e.reward, e.info[STEP], e.info.get(STEP_REWARD), e.info.get(STATE)) for e in result.experiences] == [
        (1.0, 0, 0.0, "start"), (1.0, 2, None, "7")]
    bad = run_workflow(agent_task("steps_with_states", repeat=1, isolation=isolation,
                                  agent_args={"outcomes": [{"step_reward": 1.0}, {"reward": 1, "states": "x"}]}),
                       context(engine, tokenizer))
    assert bad.experiences == [] and "give a mapping with 'reward'" in bad.info["agent_error"]


def test_an_openai_agents_sdk_agent_runs_its_tool_rounds_through_the_endpoint(tokenizer) -> None:
    """configs/examples/agents/sdk_agent.py, an OpenAI Agents SDK agent as written: the policy's tool call is read
    back as one, the SDK runs the calculator and sends its result, the policy answers; each call is a step and the
    answer is scored against the task's truth."""
    def policy(ids: list[int]) -> str:
        if "<|im_start|>tool" in tokenizer.decode(ids):
            return "The answer is 4"
        return '<tool_call>{"name": "calculate", "arguments": {"expression": "(1 + 1) * 2"}}</tool_call>'

    engine = ScriptedEngine(tokenizer, policy)
    task = dataclasses.replace(agent_task("x"), truth="4", prompt="What is (1 + 1) * 2?", workflow_args={
        "agent": str(ROOT / "configs" / "examples" / "agents" / "sdk_agent.py") + ":solve"},
                               rollout_args=SamplingArgs(temperature=1.0, max_tokens=128))
    result = run_workflow(task, context(engine, tokenizer))
    assert result.info["failed_episodes"] == 0
    assert [(e.info[EPISODE], e.info[STEP], e.reward) for e in result.experiences] == [
        (0, 0, 1.0), (0, 1, 1.0), (1, 0, 1.0), (1, 1, 1.0)]
    # The tool's result, computed by the SDK in the agent, is what the second call was conditioned on.
    second = [e for e in result.experiences if e.info[STEP] == 1]
    assert all("<|im_start|>tool\n4<|im_end|>" in tokenizer.decode(e.prompt_token_ids) for e in second)


def test_an_agent_killed_mid_episode_fails_that_episode_only(tmp_path: Path, tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "ok")
    task = agent_task("dies_once", repeat=3, isolation="process", agent_args={"marker": str(tmp_path / "died")})
    result = run_workflow(task, context(engine, tokenizer))
    assert result.info["failed_episodes"] == 1 and "killed (signal 9)" in result.info["agent_error"]
    assert len(result.experiences) == 2 and {e.reward for e in result.experiences} == {1.0}
    assert len(engine.calls) == 3  # the dead episode's call was made, and dropped with its episode


@pytest.mark.parametrize(("agent", "isolation", "error"), [
    ("hangs", "process", "killed (signal 9) or timed out"),
    ("hangs", "thread", "did not return within timeout_s"),
    ("raises", "thread", "RuntimeError: the agent's own bug"),
])
def test_a_failing_agent_skips_the_task_and_says_why(tokenizer, agent: str, isolation: str, error: str) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "ok")
    result = run_workflow(agent_task(agent, repeat=2, isolation=isolation, timeout_s=3), context(engine, tokenizer))
    assert result.experiences == [] and result.info["failed_episodes"] == 2
    assert error in result.info["agent_error"] and error in result.info["skipped"]


BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
"""The interpreter this virtual environment was made from: without its packages (no openai, no torch)."""


def test_an_agent_runs_in_an_interpreter_of_its_own(tokenizer) -> None:
    """`workflow_args.python`: each episode in a process of that interpreter, rfthpc's source on its path and
    none of the explorer's packages; what the agent prints does not garble its answer."""
    engine = ScriptedEngine(tokenizer, lambda ctx: "four")
    task = agent_task("nothing", repeat=2, python=BASE_PYTHON)
    task = dataclasses.replace(task, workflow_args={**task.workflow_args,
                                                    "agent": "tests.workflows.stdlib_agents:reward_of"})
    result = run_workflow(task, context(engine, tokenizer))
    assert result.info["failed_episodes"] == 0 and [e.reward for e in result.experiences] == [4.0, 4.0]
    assert subprocess.run([BASE_PYTHON, "-c", "import openai"], capture_output=True).returncode != 0


@pytest.mark.parametrize(("args", "message"), [
    ({"agent": "tests.workflows.stdlib_agents:ask_once", "python": "/no/such/python"}, "no such interpreter"),
    ({"agent": "tests.workflows.agents:chat_twice", "python": BASE_PYTHON},
     "cannot import module 'tests.workflows.agents'"),
    ({"agent": "tests.workflows.stdlib_agents:ask_once", "python": BASE_PYTHON, "isolation": "thread"},
     "workflow_args.python runs each episode in a process of that interpreter"),
])
def test_an_interpreter_that_cannot_run_the_agent_is_named(args: dict, message: str) -> None:
    from rfthpc.workflows.agent import arg_problems

    assert any(message in p for p in arg_problems(args)), arg_problems(args)


@pytest.mark.parametrize(("args", "message"), [
    ({"agent": "nomodule"}, "workflow_args.agent='nomodule': name the agent function"),
    ({"agent": "tests.workflows.agents:nothing"}, "has no callable 'nothing'"),
    ({"agent": f"{AGENTS}:hangs", "timeout_s": 0}, "workflow_args.timeout_s=0"),
    ({"agent": f"{AGENTS}:hangs", "isolation": "docker"}, "workflow_args.isolation='docker': use thread or process"),
])
def test_bad_workflow_args_are_named(args: dict, message: str) -> None:
    from rfthpc.workflows.agent import arg_problems

    assert any(message in p for p in arg_problems(args)), arg_problems(args)
