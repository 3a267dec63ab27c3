"""Trinity-RFT's AgentScope 1.x workflows: a real AgentScope ReAct agent (in `.venv-agentscope`, an interpreter
of its own) talks to the policy through the explorer's endpoint; its tool runs, its structured answer is
scored, every call it made is a step of its episode. The policy here is scripted, so the agent's path is known."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from rfthpc.engines.sampling import SamplingArgs
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import EPISODE, STEP
from rfthpc.workflows.registry import run_workflow
from tests.workflows.conftest import ScriptedEngine, context

BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def tool_call(name: str, **arguments: Any) -> str:
    import json

    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def math_task(workflow: str, python: str, repeat: int = 2, truth: str = "Natalia sold 48 + 24 = 72.\n#### 72",
              **workflow_args: Any) -> Task:
    return Task(task_id="gsm8k/0", taskset="gsm8k", index=0, raw={"question": "48 + 24?"}, prompt="48 + 24?",
                truth=truth, workflow=workflow, reward_fn=None,
                workflow_args={"python": python, "max_iters": 4, "timeout_s": 240, **workflow_args},
                rollout_args=SamplingArgs(temperature=1.0, max_tokens=200), repeat_times=repeat)


def test_the_math_agent_runs_python_and_its_boxed_answer_is_scored(tokenizer, agentscope_python: str) -> None:
    """agentscope_react_math_workflow: the agent's first call runs Python (AgentScope's execute_python_code, for
    real: its output comes back in the next prompt), the second gives the structured answer, the third the text
    AgentScope asks for after it (tool_choice none); each call is a step rewarded with the answer's score."""
    def policy(context: list[int]) -> str:
        seen = tokenizer.decode(context)
        if "<stdout>72" not in seen:
            return tool_call("execute_python_code", code="print(48 + 24)")
        return tool_call("generate_response", result="48 + 24 = \\boxed{72}")

    engine = ScriptedEngine(tokenizer, policy)
    result = run_workflow(math_task("agentscope_react_math_workflow", agentscope_python), context(engine, tokenizer))
    assert result.info["failed_episodes"] == 0
    assert [(e.info[EPISODE], e.info[STEP]) for e in result.experiences] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1),
                                                                           (1, 2)]
    assert all(e.reward == 1.0 for e in result.experiences)
    # The tool's output was what the agent told the policy next: the policy's second prompt holds it.
    second = tokenizer.decode(result.experiences[1].prompt_token_ids)
    assert "<stdout>72" in second


def test_a_wrong_or_missing_answer_scores_zero(tokenizer, agentscope_python: str) -> None:
    """agentscope_react_workflow: an answer boxed wrong scores 0; a policy that never calls a tool runs out of
    the agent's rounds (each a step) and scores 0 too."""
    wrong = ScriptedEngine(tokenizer, lambda ctx: tool_call("generate_response", result="\\boxed{71}"))
    result = run_workflow(math_task("agentscope_react_workflow", agentscope_python, repeat=1),
                          context(wrong, tokenizer))
    assert [e.reward for e in result.experiences] == [0.0, 0.0]
    chatty = ScriptedEngine(tokenizer, lambda ctx: "let me think")
    result = run_workflow(math_task("as_react_workflow", agentscope_python, repeat=1, max_iters=2),
                          context(chatty, tokenizer))
    # Two rounds, then AgentScope's own closing call; the text never had a box.
    assert [e.info[STEP] for e in result.experiences] == [0, 1, 2] and {e.reward for e in result.experiences} == {0.0}


@pytest.mark.parametrize(("workflow", "args", "message"), [
    ("agentscope_react_workflow", {"python": BASE_PYTHON},
     "cannot import module 'rfthpc.workflows.agentscope_agents'"),
    ("agentscope_react_workflow", {"type": "email_search"}, "needs its email database"),
    ("agentscope_react_math_workflow", {"max_iters": 0}, "workflow_args.max_iters=0"),
])
def test_bad_settings_are_named(workflow: str, args: dict, message: str, agentscope_python: str,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    from rfthpc.workflows.base import needs_of
    from rfthpc.workflows.registry import WORKFLOWS

    monkeypatch.setenv("RFTHPC_AGENTSCOPE_PYTHON", agentscope_python)
    problems = needs_of(WORKFLOWS.get(workflow)).problems(workflow, args, None, True)
    assert any(message in p for p in problems), problems


def test_without_agentscope_the_fix_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from rfthpc.workflows.agentscope_react import react_problems

    monkeypatch.delenv("RFTHPC_AGENTSCOPE_PYTHON", raising=False)
    (problem,) = react_problems({})
    assert "bash tools/setup_agentscope.sh" in problem and "RFTHPC_AGENTSCOPE_PYTHON" in problem
