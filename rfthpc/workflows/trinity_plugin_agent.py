"""One episode of a Trinity-RFT plugin workflow, as an agent of `agent_workflow`'s runner process: the
plugin's class is built on rfthpc's implementation of Trinity's workflow API (`rfthpc/compat/trinity`, put
first on the import path here) with the policy behind the episode's endpoint, run once, and what it returns
becomes one reward per call of the episode, with the step reward and state its info gives
(`rfthpc.workflows.trinity_plugin`).

Standard library only (the interpreter is the plugin's: `workflow_args.python`).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import sys
from typing import Any

COMPAT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compat")
"""The folder holding rfthpc's `trinity` package."""


def class_spec(path: str) -> str:
    """`pkg.module.Class` as `load_user_function` names it: `pkg.module:Class`."""
    module, _, name = path.rpartition(".")
    return f"{module}:{name}"


def load_plugin(path: str) -> Any:
    """The plugin workflow class at module path `path`, imported with rfthpc's `trinity` package first."""
    from rfthpc.registry import load_user_function

    if COMPAT not in sys.path:
        sys.path.insert(0, COMPAT)
    return load_user_function(class_spec(path), "default_workflow_type")


def check(path: str) -> None:
    """Import the plugin class (validation: the runner's `--check` imports this module, then calls this)."""
    load_plugin(path)


STEP_REWARD_KEY = "step_reward"
STATE_KEY = "env_state_hash"
"""The keys of a Trinity experience's `info` that Trinity's GiGPO reads: what the step earned, the state it acted in."""


def play(base_url: str, key: str, task: dict[str, Any], *, workflow_class: str, workflow_args: dict[str, Any],
         rollout: dict[str, Any], model_name: str) -> list[dict[str, Any] | None]:
    """Run the plugin's workflow on `task` for one episode; return, for each call the episode made in call order,
    its experience's reward and, where its info gives them, its step reward and state (`agent_workflow`'s
    per-call mapping), or None for a call the workflow did not return (not trained on)."""
    cls = load_plugin(workflow_class)
    from trinity.common.models.model import ModelWrapper
    from trinity.common.workflows.workflow import RolloutArgs, Task

    wanted = {k: v for k, v in rollout.items() if k in ("temperature", "top_p", "max_tokens")}
    model = ModelWrapper(base_url, key, model_name, wanted)
    plugin_task = Task(workflow_args=dict(workflow_args), rollout_args=RolloutArgs(**rollout),
                       raw_task=dict(task.get("raw") or {}), task_desc=task.get("prompt"), truth=task.get("truth"),
                       index=int(task.get("index") or 0))
    workflow = cls(task=plugin_task, model=model, auxiliary_models=[])
    run_async = getattr(workflow, "run_async", None)
    if getattr(workflow, "is_async", False) and run_async is not None and inspect.iscoroutinefunction(run_async):
        returned = asyncio.run(run_async())
    else:
        returned = workflow.run()
    made = model.calls_made
    outcomes: list[dict[str, Any] | None] = [None] * made
    for exp in returned or []:
        call = getattr(exp, "call", None)
        if call is None or not 0 <= call < made:
            raise ValueError(f"{type(workflow).__name__} returned an experience that is none of its episode's calls; "
                             "return those its model made (chat, extract_experience_from_history)")
        reward = exp.reward
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise ValueError(f"{type(workflow).__name__} left the reward of call {call} at {reward!r}; set each "
                             "returned experience's reward to a finite number")
        info = getattr(exp, "info", None) or {}
        outcomes[call] = {"reward": float(reward),
                          **({"step_reward": info[STEP_REWARD_KEY]} if info.get(STEP_REWARD_KEY) is not None else {}),
                          **({"state": str(info[STATE_KEY])} if info.get(STATE_KEY) is not None else {})}
    return outcomes
