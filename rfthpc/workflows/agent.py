"""`agent_workflow`: episodes played by an agent the user wrote, through the policy's OpenAI-compatible API.

    default_workflow_type: agent_workflow
    workflow_args:
      agent: my_pkg.agents:solve        # or /path/agents.py:solve
      agent_args: {max_steps: 4}        # keyword arguments of the agent (optional)
      timeout_s: 600                    # an episode still running then fails (optional)
      isolation: thread                 # or process: each episode in a process of its own
      python: /path/to/venv/bin/python  # run each episode's process with this interpreter (optional)

The agent is a function `agent(base_url, api_key, task, **agent_args)`: it talks to the policy with
any OpenAI-compatible client (`openai.OpenAI(base_url=base_url, api_key=api_key)`, AgentScope, the
OpenAI Agents SDK, a plain HTTP call) and returns the episode's reward, or one entry per call it
made: its reward, None for a call not to train on, or a mapping `{"reward": r, "step_reward": s, "state": h}`
(the last two optional: what the call itself earned, and the environment state it acted in, which GiGPO
groups steps by). `task` is a dict of the task: `task_id`, `index`, `prompt`, `messages`, `truth`,
`system_prompt` and `raw` (the whole row). Each of the task's `repeat_times` episodes runs at the
same time with a base URL of its own (`rfthpc.workflows.endpoint`), in a thread of the explorer, or,
with `isolation: process`, in a process of its own (`rfthpc.workflows.agent_runner`) that a timeout kills
with everything it started. `python` runs those processes with another interpreter: an environment of the
agent's own packages, which need not agree with vLLM's (AgentScope 1.x pins an older `mcp` than vLLM);
rfthpc's source is put on its PYTHONPATH, its dependencies are not needed there.

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
import functools
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rfthpc.errors import ConfigError
from rfthpc.registry import load_user_function
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import (
    EPISODE,
    STATE,
    STEP,
    STEP_REWARD,
    Experience,
    WorkflowContext,
    WorkflowResult,
    needs,
)
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
    python: str | None = None

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
    if not isinstance(workflow_args.get("agent_args", {}), Mapping):
        out.append(f"workflow_args.agent_args={workflow_args['agent_args']!r}: give a mapping of the agent's "
                   "keyword arguments")
    out += timeout_problems(workflow_args)
    if workflow_args.get("isolation", "thread") not in ("thread", "process"):
        out.append(f"workflow_args.isolation={workflow_args['isolation']!r}: use thread or process")
    python = workflow_args.get("python")
    if python is not None:
        if not isinstance(python, str) or not python:
            out.append(f"workflow_args.python={python!r}: give the path of a Python interpreter")
        elif workflow_args.get("isolation", "process") != "process":
            out.append("workflow_args.python runs each episode in a process of that interpreter: remove "
                       f"isolation: {workflow_args['isolation']} (or set it to process)")
        elif import_agent and isinstance(agent, str) and ":" in agent:
            out += runner_problems(python, agent)
    elif import_agent and isinstance(agent, str) and ":" in agent:
        try:
            load_user_function(agent, "workflow_args.agent")
        except ConfigError as e:
            out.append(str(e))
    return out


def timeout_problems(workflow_args: Mapping[str, Any]) -> list[str]:
    """Whether `workflow_args.timeout_s` is a time an episode may take: [] or what is wrong."""
    timeout = workflow_args.get("timeout_s", 600.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        return [f"workflow_args.timeout_s={timeout!r}: give the seconds an episode may take (> 0)"]
    return []


RFTHPC_SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The directory holding the rfthpc package, put on an agent process's PYTHONPATH."""


def runner_command(python: str | None) -> tuple[list[str], dict[str, str]]:
    """The command and environment of an agent's process (`rfthpc.workflows.agent_runner`)."""
    path = os.pathsep.join(p for p in (RFTHPC_SOURCE, os.environ.get("PYTHONPATH", "")) if p)
    return [python or sys.executable, "-m", "rfthpc.workflows.agent_runner"], {**os.environ, "PYTHONPATH": path}


@functools.cache
def runner_problems(python: str, agent: str, *check_args: str) -> tuple[str, ...]:
    """Whether `python` can run agent `agent` (with `check_args`: whether `agent`, a check function, passes
    with them): () or what is wrong, naming `workflow_args.python` (asked once per process: every task's check
    reads the answer)."""
    command, env = runner_command(python)
    try:
        done = subprocess.run([*command, "--check", agent, *check_args], env=env, capture_output=True, text=True,
                              timeout=120)
    except FileNotFoundError:
        return (f"workflow_args.python={python!r}: no such interpreter; give the path of a Python (e.g. "
                "/path/to/venv/bin/python) on every node",)
    except (OSError, subprocess.TimeoutExpired) as e:
        return (f"workflow_args.python={python!r} cannot be run: {e}",)
    answer = _last_answer(done.stdout)
    if answer is None:
        return (f"workflow_args.python={python!r} could not import the agent: {done.stderr.strip()[-800:]}",)
    if answer.get("status") != "ok":
        return (f"{answer.get('error')} (with workflow_args.python {python})",)
    return ()


def _last_answer(stdout: str) -> dict[str, Any] | None:
    """The runner's JSON answer, its last line of output; None if there is none."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        return found if isinstance(found, dict) else None
    return None


def task_view(task: Task) -> dict[str, Any]:
    """What the agent is told of its task."""
    return {"task_id": task.task_id, "index": task.index, "prompt": task.prompt,
            "messages": None if task.messages is None else [dict(m) for m in task.messages],
            "truth": task.truth, "system_prompt": task.system_prompt, "raw": dict(task.raw)}


def _call_agent(spec: str, base_url: str, key: str, task: dict[str, Any], agent_args: Mapping[str, Any]) -> Any:
    return load_user_function(spec, "workflow_args.agent")(base_url, key, task, **agent_args)


class _Episode:
    """One episode's agent, running in a thread or a process until it returns or its time is up."""

    def __init__(self, args: AgentWorkflowArgs, base_url: str, key: str, task: dict[str, Any],
                 caller: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
        self.result: tuple[str, Any] | None = None
        self._caller = caller
        self._process: subprocess.Popen[bytes] | None = None
        if args.isolation == "process" or args.python is not None:
            command, env = runner_command(args.python)
            # A session of its own: a timeout ends the agent and whatever it started (tools, shells).
            self._process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             start_new_session=True)
            job = json.dumps({"agent": args.agent, "base_url": base_url, "key": key, "task": task,
                              "agent_args": dict(args.agent_args)}).encode()
            self._runner = threading.Thread(target=self._talk, args=(job,), daemon=True)
        else:
            self._runner = threading.Thread(target=self._in_thread, daemon=True, args=(
                args.agent, base_url, key, task, args.agent_args))
        self._runner.start()

    def _in_thread(self, spec: str, base_url: str, key: str, task: dict[str, Any],
                   agent_args: Mapping[str, Any]) -> None:
        try:
            with self._caller():
                self.result = ("ok", _call_agent(spec, base_url, key, task, agent_args))
        except BaseException as e:
            self.result = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}")

    def _talk(self, job: bytes) -> None:
        assert self._process is not None
        try:
            with self._caller():
                out, _ = self._process.communicate(job)
        except (OSError, ValueError):
            return
        answer = _last_answer(out.decode(errors="replace"))
        if answer is not None:
            self.result = ("ok", answer.get("value")) if answer.get("status") == "ok" else (
                "error", str(answer.get("error")))

    def wait(self, deadline: float) -> tuple[str, Any]:
        """("ok", what the agent returned) or ("error", why the episode failed), by `deadline` at the latest."""
        self._runner.join(max(0.0, deadline - time.monotonic()))
        if self._process is None:
            if self._runner.is_alive():
                return "error", "the agent did not return within timeout_s (its thread is left to end on its own)"
            return self.result or ("error", "the agent's thread ended without a result")
        if self._runner.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._runner.join()
        if self.result is None:
            code = self._process.returncode
            return "error", (f"the agent's process ended with exit code {code} and no result" if code is not None
                             and code >= 0 else f"the agent's process was killed (signal {-(code or 0)}) or timed out")
        return self.result


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"the agent returned {value!r} as {what}; return a finite number")
    return float(value)


def _call_outcome(value: Any) -> dict[str, Any] | None:
    """One call's entry of what the agent returned, as {reward, step_reward, state} (None: not trained on)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        reward = _number(value, "a reward")
        return {"reward": reward, STEP_REWARD: reward}
    unknown = sorted(set(value) - {"reward", STEP_REWARD, STATE})
    if unknown or "reward" not in value:
        raise ValueError(f"the agent returned {dict(value)!r} for a call; give a mapping with 'reward' and, if it "
                         f"says them, '{STEP_REWARD}' (what the call itself earned) and '{STATE}' (the state it acted in)")
    out: dict[str, Any] = {"reward": _number(value["reward"], "a reward")}
    if value.get(STEP_REWARD) is not None:
        out[STEP_REWARD] = _number(value[STEP_REWARD], "a step reward")
    if value.get(STATE) is not None:
        out[STATE] = str(value[STATE])
    return out


def _outcomes(returned: Any, calls: list[Call]) -> list[dict[str, Any] | None]:
    """Per call, its reward and what the agent says of the step (None: a call not trained on); ValueError says
    what is wrong with what the agent returned."""
    if isinstance(returned, (list, tuple)):
        if len(returned) != len(calls):
            raise ValueError(f"the agent returned {len(returned)} rewards for its {len(calls)} calls; return one "
                             "per call (None for one not to train on), or one for the episode")
        return [_call_outcome(r) for r in returned]
    reward = _number(returned, "a reward")
    return [{"reward": reward}] * len(calls)


def episode_experiences(calls: list[Call], returned: Any, episode: int) -> list[Experience]:
    """Each call as an experience: exactly its prompt and reply tokens, marked with `episode` and its step.
    Per call the agent may return a reward (also the step's own, `STEP_REWARD`), None (the call is left out), or
    a mapping of its `reward` and, where it says them, its `step_reward` and the `state` it acted in (`STATE`,
    which GiGPO groups steps by). ValueError: what the agent returned is no reward for these calls."""
    outcomes = _outcomes(returned, calls)
    return [Experience(prompt_token_ids=c.prompt_ids, response_token_ids=c.response_ids, logprobs=c.logprobs,
                       loss_mask=[1] * len(c.response_ids), reward=o["reward"], response_text=c.text,
                       finish_reason=c.finish_reason,
                       info={EPISODE: episode, STEP: k, "calls": len(calls),
                             **{key: o[key] for key in (STEP_REWARD, STATE) if key in o}})
            for k, (c, o) in enumerate(zip(calls, outcomes, strict=True)) if o is not None]


@needs(args=ARG_NAMES, reward_fn=False, check=arg_problems)
def agent_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """`repeat_times` episodes of the user's agent on the task, at the same time (see the module doc)."""
    return play_agent(task, ctx, AgentWorkflowArgs.of(task.workflow_args))


def play_agent(task: Task, ctx: WorkflowContext, args: AgentWorkflowArgs,
               score: Callable[[Any], Any] | None = None) -> WorkflowResult:
    """`repeat_times` episodes of agent `args.agent` on the task, at the same time, each call an experience;
    `score` turns what an episode's agent returned into its reward (or rewards per call), which the agent
    returns itself when None. A `score` that raises ValueError fails that episode."""
    endpoint = endpoint_for(ctx.engine, ctx.prompts, ctx.endpoint_started)
    view = task_view(task)
    opened = [endpoint.open_episode(task.rollout_args, task.chat_template) for _ in range(task.repeat_times)]
    deadline = time.monotonic() + args.timeout_s
    # Each episode's agent calls the engine through the endpoint: the batcher waits for its calls too.
    caller = getattr(ctx.engine, "outside_caller", contextlib.nullcontext)
    runs = [_Episode(args, base_url, endpoint.key, view, caller) for _, base_url in opened]
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
                experiences += episode_experiences(calls, returned if score is None else score(returned), e)
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
