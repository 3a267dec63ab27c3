"""Agents as users write them for `agent_workflow`: plain functions talking to the policy with the `openai` client."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from openai import OpenAI


def chat_twice(base_url: str, api_key: str, task: dict[str, Any], calls: int = 2) -> float:
    """A conversation of `calls` turns, each reply fed back; reward: the number of characters replied, capped."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": task["prompt"]}]
    replied = 0
    for _ in range(calls):
        reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
        text = reply.choices[0].message.content or ""
        replied += len(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "again"}]
    return float(min(replied, 20))


def per_call_rewards(base_url: str, api_key: str, task: dict[str, Any]) -> list[float]:
    """Two calls, a reward each."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    for _ in range(2):
        client.completions.create(model="policy", prompt=task["prompt"], max_tokens=4)
    return [0.25, 0.75]


def steps_with_states(base_url: str, api_key: str, task: dict[str, Any],
                      outcomes: list[Any]) -> list[Any]:
    """A call per entry of `outcomes`, which it returns as given (per-call mappings of reward, step reward, state)."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    for _ in outcomes:
        client.completions.create(model="policy", prompt=task["prompt"], max_tokens=4)
    return outcomes


def dies_once(base_url: str, api_key: str, task: dict[str, Any], marker: str) -> float:
    """The first episode to take `marker` kills its own process after one call (as an agent crashing
    mid-episode would); the others finish."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["prompt"]}])
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return 1.0
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    return 0.0


def hangs(base_url: str, api_key: str, task: dict[str, Any]) -> float:
    """Never returns in time."""
    time.sleep(3600)
    return 0.0


def raises(base_url: str, api_key: str, task: dict[str, Any]) -> float:
    raise RuntimeError("the agent's own bug")


