"""An agent that needs nothing but the standard library, run by an interpreter without rfthpc's packages
(`workflow_args.python`)."""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any


def ask_once(base_url: str, api_key: str, task: dict[str, Any]) -> dict[str, Any]:
    """One chat call over plain HTTP; returns the interpreter that ran it beside the reward."""
    body = {"model": "policy", "messages": [{"role": "user", "content": task["prompt"]}]}
    request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {api_key}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        text = json.loads(reply.read())["choices"][0]["message"]["content"]
    print("the agent's own output, which must not garble its answer")
    return {"reward": float(len(text)), "python": sys.executable}


def reward_of(base_url: str, api_key: str, task: dict[str, Any]) -> float:
    """`ask_once`, returning its reward only."""
    return ask_once(base_url, api_key, task)["reward"]
