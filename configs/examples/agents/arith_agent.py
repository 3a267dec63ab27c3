"""An agent as a user writes it, for `agent_workflow` (configs/examples/agent-openai.yaml): it answers the demo's
arithmetic question with the plain `openai` client, then is asked to check its answer and answers again; the
reward is whether its last answer is right. Nothing here knows about rfthpc's training: the explorer serves the
policy behind `base_url` and records each call."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

from rfthpc.rewards.math_reward import accuracy_reward


def solve(base_url: str, api_key: str, task: dict[str, Any], attempts: int = 2) -> float:
    """Answer, then answer again after "Check your answer." (`attempts` calls in all); 1.0 if the last is right."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": task["prompt"]}]
    answer = ""
    for _ in range(attempts):
        reply = client.chat.completions.create(model="policy", messages=messages)
        answer = reply.choices[0].message.content or ""
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Check your answer."}]
    return accuracy_reward(answer, task["truth"])["accuracy"]
