"""Trinity-RFT's AgentScope 1.x workflows: a real AgentScope ReAct agent answers each task through the
policy's OpenAI-compatible endpoint, every model call it makes is a step of the episode.

    default_workflow_type: agentscope_react_workflow    # Trinity's AgentScopeReActWorkflow (as_react_workflow)
    default_workflow_type: agentscope_react_math_workflow   # Trinity's AgentScopeReactMathWorkflow
    workflow_args:
      python: /path/.venv-agentscope/bin/python   # an interpreter with AgentScope 1.x (see below)
      max_iters: 10                                # the agent's reasoning-acting rounds (AgentScope's default)
      timeout_s: 600                               # an episode still running then fails
      system_prompt: ...                           # replaces the workflow's own

`agentscope_react_workflow` (`type: gsm8k`, Trinity's only template that needs no outside service) gives the
agent AgentScope's meta tool and no tools of its own, `agentscope_react_math_workflow` gives it
`execute_python_code`; both ask for a structured answer (AgentScope's `generate_response` tool), whose
`result` is scored against the task's reference answer: 1 if its last `\\boxed{}` equals it, else 0
(`boxed_accuracy_reward`). Every call of the episode is an experience with that reward, marked with its
episode and step, as `agent_workflow` records them (train with `multi_step_grpo`).

The agent runs in a process of `python` (`rfthpc.workflows.agentscope_agents`, through `agent_workflow`'s
runner): AgentScope 1.0.21 imports names that `mcp` 2.x removed, and vLLM requires mcp 2.x, so AgentScope
lives in an environment of its own (`bash tools/setup_agentscope.sh` makes `.venv-agentscope` and prints
its interpreter). Without `python`, the interpreter in the environment variable `RFTHPC_AGENTSCOPE_PYTHON`
is used (so a Trinity-RFT config runs unchanged), else the explorer's own if it has AgentScope.

Differences from Trinity-RFT 0.6.0: the system prompts are rfthpc's own wording of the same instructions;
`agentscope_react_math_workflow` scores with rfthpc's boxed-answer comparison where Trinity calls the
naive DAPO scorer of its benchmark plugins, and offers no LLM judge (`all_llm_judge`, `case_by_case`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from typing import Any

from rfthpc.rewards.math_reward import boxed_accuracy_reward
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.agent import AgentWorkflowArgs, play_agent, runner_problems, timeout_problems
from rfthpc.workflows.base import WorkflowContext, WorkflowResult, needs

AGENT = "rfthpc.workflows.agentscope_agents:react"
ARGS = ("python", "max_iters", "timeout_s", "system_prompt")
REACT_PROMPT = ("You solve math problems step by step, and may use the tools you are given. Put the final answer "
                "inside \\boxed{}.")
MATH_PROMPT = ("You solve math problems with tools: you may write Python code and run it to compute or to check "
               "a step. Put the final answer inside \\boxed{}.")
TASK_TYPES = ("gsm8k",)
"""The task types of Trinity's agentscope_react_workflow that rfthpc runs (`workflow_args.type`)."""
SETUP = ("make an environment with `bash tools/setup_agentscope.sh` (AgentScope 1.0.21 needs mcp<2, vLLM mcp>=2: "
         "they cannot share one) and give its interpreter as workflow_args.python")


def _problems(workflow_args: Mapping[str, Any]) -> list[str]:
    """What is wrong with the workflow_args of an AgentScope workflow, each naming the key and the fix."""
    out = []
    iters = workflow_args.get("max_iters", 10)
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        out.append(f"workflow_args.max_iters={iters!r}: give the agent's reasoning-acting rounds (an integer >= 1)")
    out += timeout_problems(workflow_args)
    prompt = workflow_args.get("system_prompt")
    if prompt is not None and not isinstance(prompt, str):
        out.append(f"workflow_args.system_prompt={prompt!r}: give the agent's system prompt as text")
    python = workflow_args.get("python")
    if python is not None and (not isinstance(python, str) or not python):
        return [*out, f"workflow_args.python={python!r}: give the path of a Python interpreter"]
    found = interpreter(python)
    if found is None:
        return [*out, f"workflow_args.python: this workflow runs an AgentScope 1.x agent and this Python has no "
                      f"AgentScope: {SETUP} (or set {PYTHON_VARIABLE})"]
    return [*out, *runner_problems(found, AGENT)]


PYTHON_VARIABLE = "RFTHPC_AGENTSCOPE_PYTHON"
"""The environment variable naming the AgentScope interpreter when workflow_args.python does not."""


def interpreter(python: str | None) -> str | None:
    """The interpreter the agent runs in: `python`, else $RFTHPC_AGENTSCOPE_PYTHON, else this one if it has
    AgentScope; None if none of these."""
    if python:
        return python
    if os.environ.get(PYTHON_VARIABLE):
        return os.environ[PYTHON_VARIABLE]
    return sys.executable if importlib.util.find_spec("agentscope") is not None else None


def react_problems(workflow_args: Mapping[str, Any]) -> list[str]:
    """`agentscope_react_workflow`'s checks: a known task type, then the common ones."""
    kind = workflow_args.get("type", "gsm8k")
    out = []
    if kind == "email_search":
        out.append("workflow_args.type='email_search': Trinity's email search agent needs its email database and an "
                   "LLM judge, which rfthpc does not ship; use type gsm8k, or your own agent with agent_workflow")
    elif kind not in TASK_TYPES:
        out.append(f"workflow_args.type={kind!r}: the task types are {', '.join(TASK_TYPES)}")
    return out + _problems({k: v for k, v in workflow_args.items() if k != "type"})


def _run(task: Task, ctx: WorkflowContext, system_prompt: str, tools: list[str], meta_tool: bool,
         name: str) -> WorkflowResult:
    args = task.workflow_args
    params = task.rollout_args
    agent_args = {"system_prompt": args.get("system_prompt") or system_prompt, "tools": tools,
                  "max_iters": args.get("max_iters", 10), "meta_tool": meta_tool, "name": name,
                  "temperature": params.temperature, "max_tokens": params.max_tokens}
    python = interpreter(args.get("python")) or sys.executable
    run = AgentWorkflowArgs(agent=AGENT, agent_args=agent_args, timeout_s=float(args.get("timeout_s", 600.0)),
                            isolation="process", python=python)

    def score(answer: Any) -> float:
        if not isinstance(answer, dict) or not isinstance(answer.get("result"), str):
            raise ValueError(f"the agent answered {answer!r}, not {{'result': text}}")
        return boxed_accuracy_reward(answer["result"], task.truth)["accuracy"]

    return play_agent(task, ctx, run, score)


@needs(args=("type", *ARGS), reward_fn=False, truth=True, check=react_problems)
def agentscope_react_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Trinity-RFT's AgentScopeReActWorkflow (`as_react_workflow`): a ReAct agent with AgentScope's meta tool
    answers the task in a structured reply, scored by its boxed answer (see the module doc)."""
    return _run(task, ctx, REACT_PROMPT, [], meta_tool=True, name="react_agent")


@needs(args=ARGS, reward_fn=False, truth=True, check=_problems)
def agentscope_react_math_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Trinity-RFT's AgentScopeReactMathWorkflow: a ReAct agent that may run Python code answers the task in a
    structured reply, scored by its boxed answer (see the module doc)."""
    return _run(task, ctx, MATH_PROMPT, ["execute_python_code"], meta_tool=False, name="math_react_agent")
