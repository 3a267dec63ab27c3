"""Trinity-RFT plugin workflows, named by their module path as Trinity's configs name them:

    default_workflow_type: examples.agentscope_frozenlake.workflow.FrozenLakeWorkflow
    workflow_args:
      python: /path/.venv-agentscope/bin/python   # the plugin's interpreter (optional, see below)
      timeout_s: 600                               # an episode still running then fails (optional)
      env_max_steps: 8                             # every other key is the plugin's own

A plugin workflow subclasses Trinity's `Workflow`: built with its task and the model, its `run` (or
`run_async`) plays one episode and returns the experiences of the model calls it made, each with a reward.
rfthpc runs each of the task's `repeat_times` episodes in a process of its own (`agent_workflow`'s runner,
`rfthpc.workflows.trinity_plugin_agent`) with rfthpc's implementation of the Trinity API such a plugin uses
first on the import path (`rfthpc/compat/trinity`: `Workflow`, `Task`, `ModelWrapper`, `Experience`,
`WORKFLOWS.register_module`, `get_logger`). Its model is the policy behind the episode's OpenAI-compatible
endpoint: `model.get_openai_client()` / `get_openai_async_client()` (which AgentScope's `OpenAIChatModel` and
the OpenAI Agents SDK take), `model.chat(messages, n=...)` and `model.extract_experience_from_history()`.
Every call the endpoint answers is one step of the episode, recorded exactly (prompt and reply tokens,
behaviour log-probabilities); the experiences the plugin returns give their calls' rewards (and, from their
`info`, the `step_reward` and `env_state_hash` Trinity's GiGPO reads), and a call it does not return is not
trained on (train with `multi_step_grpo` or `gigpo`). The plugin's module comes from the user,
importable where the explorer runs (its working directory, PYTHONPATH or an installed package), as with
Trinity.

`python` is the interpreter of the plugin's packages (AgentScope 1.x lives in one of its own, `bash
tools/setup_agentscope.sh`); without it, `$RFTHPC_AGENTSCOPE_PYTHON`, else the explorer's own. Validation
imports the plugin there, so a missing module or package is an error before anything is queued.

Differences from Trinity-RFT: a plugin that reads Trinity's internals beyond these (its engine, `ModelWrapper`'s
token-level `generate`, auxiliary models) fails its episodes naming what it lacks; the calls of one episode are
matched to the endpoint's records in the order they were answered, so an episode should make its calls one at
a time (Trinity's frozen-lake and ReAct plugins do); `workflow_args` keys `python` and `timeout_s` are rfthpc's.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.agent import AgentWorkflowArgs, play_agent, runner_problems, timeout_problems
from rfthpc.workflows.agentscope_react import interpreter as agentscope_interpreter
from rfthpc.workflows.base import Workflow, WorkflowContext, WorkflowResult, needs

AGENT = "rfthpc.workflows.trinity_plugin_agent:play"
CHECK = "rfthpc.workflows.trinity_plugin_agent:check"
MODEL_NAME = "policy"
"""What the plugin's model is called (`model.model_path`, the `model` of its requests: the endpoint serves one)."""
OWN_ARGS = ("python", "timeout_s")
"""The `workflow_args` keys rfthpc reads; the plugin gets the others."""


def interpreter(python: str | None) -> str:
    """The plugin's interpreter: `python`, else $RFTHPC_AGENTSCOPE_PYTHON, else this one (the AgentScope
    workflows' choice, without requiring AgentScope)."""
    return agentscope_interpreter(python) or sys.executable


def plugin_problems(path: str, workflow_args: Mapping[str, Any]) -> list[str]:
    """What is wrong with running plugin `path` with these `workflow_args`, each naming the key and the fix."""
    out = timeout_problems(workflow_args)
    python = workflow_args.get("python")
    if python is not None and (not isinstance(python, str) or not python):
        return [*out, f"workflow_args.python={python!r}: give the path of the plugin's Python interpreter"]
    return [*out, *runner_problems(interpreter(python), CHECK, path)]


@functools.cache
def plugin_workflow(path: str) -> Workflow:
    """The workflow that runs Trinity-RFT plugin class `path` (the workflow registry's answer to a module path)."""

    def check(workflow_args: Mapping[str, Any]) -> list[str]:
        return plugin_problems(path, workflow_args)

    @needs(open_args=True, reward_fn=False, text_columns=False, check=check)
    def run(task: Task, ctx: WorkflowContext) -> WorkflowResult:
        args = task.workflow_args
        params = task.rollout_args
        agent_args = {"workflow_class": path,
                      "workflow_args": {k: v for k, v in args.items() if k not in OWN_ARGS},
                      "rollout": {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                                  "max_tokens": params.max_tokens, "logprobs": params.logprobs},
                      "model_name": MODEL_NAME}
        played = AgentWorkflowArgs(agent=AGENT, agent_args=agent_args, timeout_s=float(args.get("timeout_s", 600.0)),
                                   isolation="process", python=interpreter(args.get("python")))
        return play_agent(task, ctx, played)

    run.__name__ = run.__qualname__ = f"trinity_plugin[{path}]"
    return run
