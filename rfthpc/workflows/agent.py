"""`agent_workflow`: episodes played by an agent the user wrote, through the policy's OpenAI-compatible API.

    default_workflow_type: agent_workflow
    workflow_args:
      agent: my_pkg.agents:solve        # or /path/agents.py:solve
      agent_args: {max_steps: 4}        # keyword arguments of the agent (optional)
      timeout_s: 600                    # an episode still running then fails (optional)
      isolation: thread                 # or process: each episode in a process of its own

The agent is a function `agent(base_url, api_key, task, **agent_args)`: it talks to the policy with
any OpenAI-compatible client (`openai.OpenAI(base_url=base_url, api_key=api_key)`, AgentScope, the
OpenAI Agents SDK, a plain HTTP call) and returns the episode's reward, or one reward per call it
made. `task` is a dict of the task: `task_id`, `index`, `prompt`, `messages`, `truth`,
`system_prompt` and `raw` (the whole row). Each of the task's `repeat_times` episodes runs at the
same time with a base URL of its own (`rfthpc.workflows.endpoint`), in a thread of the explorer, or,
with `isolation: process`, in a process of its own that a timeout kills.

Every call the policy answered is one experience (its prompt as the engine received it, its reply's
tokens and behaviour log-probabilities, exactly), marked with its episode and its place in it
(`EPISODE`, `STEP`), so `multi_step_grpo` trains each call with its episode's group-normalised reward.
An agent that raises, times out, is killed or returns no valid reward fails its episode only: the
episode's calls are dropped and counted (`failed_episodes`, the first error in `agent_error`); if
every episode fails, the task is skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import multiprocessing
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rfthpc.errors import ConfigError
from rfthpc.registry import load_user_function
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import EPISODE, STEP, STEP_REWARD, Experience, WorkflowContext, WorkflowResult, needs
from rfthpc.workflows.endpoint import Call, endpoint_for

Isolation = Literal["thread", "process"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentWorkflowArgs:
    """The `workflow_args` of `agent_workflow`."""

    agent: str
    agent_args: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0
    isolation: Isolation = "thread"

    @classmethod
    def of(cls, workflow_args: Mapping[str, Any]) -> AgentWorkflowArgs:
        """Parse `workflow_args`; a ConfigError names every bad key and its fix. The agent is imported where
        it runs (checked at validation and before each task by `arg_problems`)."""
        problems = arg_problems(workflow_args, import_agent=False)
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(**workflow_args)


ARG_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(AgentWorkflowArgs))


def arg_problems(workflow_args: Mapping[str, Any], import_agent: bool = True) -> list[str]:
    """What is wrong with `agent_workflow`'s workflow_args, each message naming the key and the fix (with
    `import_agent`, also whether the agent function can be imported)."""
    out = []
    agent = workflow_args.get("agent")
    if not isinstance(agent, str) or ":" not in agent:
        out.append(f"workflow_args.agent={agent!r}: name the agent function as 'package.module:function' or "
                   "'file.py:function'")
    elif import_agent:
        try:
            load_user_function(agent, "workflow_args.agent")
        except ConfigError as e:
            out.append(str(e))
    if not isinstance(workflow_args.get("agent_args", {}), Mapping):
        out.append(f"workflow_args.agent_args={workflow_args['agent_args']!r}: give a mapping of the agent's "
                   "keyword arguments")
    timeout = workflow_args.get("timeout_s", 600.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        out.append(f"workflow_args.timeout_s={timeout!r}: give the seconds an episode may take (> 0)")
    if workflow_args.get("isolation", "thread") not in ("thread", "process"):
        out.append(f"workflow_args.isolation={workflow_args['isolation']!r}: use thread or process")
    return out


def task_view(task: Task) -> dict[str, Any]:
    """What the agent is told of its task."""
    return {"task_id": task.task_id, "index": task.index, "prompt": task.prompt,
            "messages": None if task.messages is None else [dict(m) for m in task.messages],
            "truth": task.truth, "system_prompt": task.system_prompt, "raw": dict(task.raw)}


def _call_agent(spec: str, base_url: str, key: str, task: dict[str, Any], agent_args: Mapping[str, Any]) -> Any:
    return load_user_function(spec, "workflow_args.agent")(base_url, key, task, **agent_args)


def _in_process(spec: str, base_url: str, key: str, task: dict[str, Any], agent_args: dict[str, Any],
                conn: Any) -> None:
    """A process's episode: the agent's result, or its error, sent back through `conn`."""
    try:
        conn.send(("ok", _call_agent(spec, base_url, key, task, agent_args)))
    except BaseException as e:
        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"))
    finally:
        conn.close()


class _Episode:
    """One episode's agent, running in a thread or a process until it returns or its time is up."""

    def __init__(self, args: AgentWorkflowArgs, base_url: str, key: str, task: dict[str, Any]) -> None:
        self.result: tuple[str, Any] | None = None
        if args.isolation == "process":
            context = multiprocessing.get_context("spawn")
            self._conn, child = context.Pipe(duplex=False)
            self._runner: Any = context.Process(target=_in_process, daemon=True, args=(
                args.agent, base_url, key, task, dict(args.agent_args), child))
            self._runner.start()
            child.close()
        else:
            self._conn = None
            self._runner = threading.Thread(target=self._in_thread, daemon=True, args=(
                args.agent, base_url, key, task, args.agent_args))
            self._runner.start()

    def _in_thread(self, spec: str, base_url: str, key: str, task: dict[str, Any],
                   agent_args: Mapping[str, Any]) -> None:
        try:
            self.result = ("ok", _call_agent(spec, base_url, key, task, agent_args))
        except BaseException as e:
            self.result = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}")

    def wait(self, deadline: float) -> tuple[str, Any]:
        """("ok", what the agent returned) or ("error", why the episode failed), by `deadline` at the latest."""
        if self._conn is None:
            self._runner.join(max(0.0, deadline - time.monotonic()))
            if self._runner.is_alive():
                return "error", "the agent did not return within timeout_s (its thread is left to end on its own)"
            return self.result or ("error", "the agent's thread ended without a result")
        if self._conn.poll(max(0.0, deadline - time.monotonic())):
            try:
                self.result = self._conn.recv()
            except EOFError:
                pass
        self._runner.join(5.0 if self.result is not None else 0.0)
        if self._runner.is_alive():
            self._runner.kill()
            self._runner.join()
        if self.result is None:
            code = self._runner.exitcode
            return "error", (f"the agent's process ended with exit code {code} and no result" if code is not None
                             and code >= 0 else f"the agent's process was killed (signal {-(code or 0)}) or timed out")
        return self.result


def _rewards(returned: Any, calls: list[Call]) -> list[float]:
    """One reward per call from what the agent returned; ValueError says what is wrong with it."""
    def number(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"the agent returned {value!r} as a reward; return a finite number")
        return float(value)

    if isinstance(returned, (list, tuple)):
        if len(returned) != len(calls):
            raise ValueError(f"the agent returned {len(returned)} rewards for its {len(calls)} calls; return one "
                             "per call, or one for the episode")
        return [number(r) for r in returned]
    return [number(returned)] * len(calls)


def episode_experiences(calls: list[Call], returned: Any, episode: int) -> list[Experience]:
    """Each call as an experience: exactly its prompt and reply tokens, marked with `episode` and its step;
    rewards given per call are also each step's own (`STEP_REWARD`). ValueError: what the agent returned is
    no reward for these calls."""
    rewards = _rewards(returned, calls)
    per_call = isinstance(returned, (list, tuple))
    return [Experience(prompt_token_ids=c.prompt_ids, response_token_ids=c.response_ids, logprobs=c.logprobs,
                       loss_mask=[1] * len(c.response_ids), reward=r, response_text=c.text,
                       finish_reason=c.finish_reason,
                       info={EPISODE: episode, STEP: k, "calls": len(calls), **({STEP_REWARD: r} if per_call else {})})
            for k, (c, r) in enumerate(zip(calls, rewards, strict=True))]


@needs(args=ARG_NAMES, reward_fn=False, check=arg_problems)
def agent_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """`repeat_times` episodes of the user's agent on the task, at the same time (see the module doc)."""
    args = AgentWorkflowArgs.of(task.workflow_args)
    endpoint = endpoint_for(ctx.engine, ctx.prompts)
    view = task_view(task)
    opened = [endpoint.open_episode(task.rollout_args, task.chat_template) for _ in range(task.repeat_times)]
    deadline = time.monotonic() + args.timeout_s
    runs = [_Episode(args, base_url, endpoint.key, view) for _, base_url in opened]
    # The explorer's engine batches its workflows' calls: this one's come from the endpoint's threads.
    outside = getattr(ctx.engine, "waiting_elsewhere", contextlib.nullcontext)
    with outside():
        outcomes = [run.wait(deadline) for run in runs]
    experiences: list[Experience] = []
    errors: list[str] = []
    for e, ((episode, _), (status, returned)) in enumerate(zip(opened, outcomes, strict=True)):
        calls = endpoint.close_episode(episode)
        if status == "ok":
            try:
                experiences += episode_experiences(calls, returned, e)
                continue
            except ValueError as err:
                returned = str(err)
        errors.append(str(returned))
    info: dict[str, Any] = {"failed_episodes": len(errors)}
    if errors:
        info["agent_error"] = errors[0]
        log.warning("task %s: %d of %d episodes of agent %s failed; the first: %s", task.task_id, len(errors),
                    len(runs), args.agent, errors[0])
    if not experiences:
        info["skipped"] = (f"every episode of the agent failed: {errors[0]}" if errors
                           else "the agent made no call to the policy")
    return WorkflowResult(experiences, info)
