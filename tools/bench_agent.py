"""Benchmark multi-turn episodes (`env_workflow`) against single-turn generation, and an agent playing the same
episodes through the explorer's OpenAI-compatible endpoint (`agent_workflow`), on the same engine.

usage: python tools/bench_agent.py [--tasks 16] [--repeat 4] [--turns 4] [--tokens-per-turn 16]
                                   [--engine vllm|transformers] [--rounds 2] [--model DIR]

One engine (vLLM's CPU build by default; the same code on GPU) serves the ~30M-parameter `bench30m` model
of tools/bench_rollout.py (built offline unless `--model` names one), whose replies cost the engine more
than a call through the endpoint adds, as any real model's do: with the 0.1M-parameter `tiny` model
(`--model`) a 16-token reply costs the engine ~2 ms of the machine and the call ~3 ms more, most of it the
`openai` client's own Python (docs/agents.md). Every reply is exactly `--tokens-per-turn` tokens (the
engine's minimum and maximum response length), so both sides generate the same tokens:

- agent:  the explorer's rollout path (`run_tasks`: runner threads, the request batcher) on
          `--tasks` tasks of `env_workflow`, each a group of `--repeat` episodes of `--turns` turns
          of a small environment defined here; timed from the first task to the last group.
- single: the same engine's `generate_batch` on the very requests the agent side sent (recorded),
          one call per batch the agent side made: single-turn prompts of the same lengths, the same
          number of generated tokens, without workflows, environments or conversation building.
- endpoint: the same tasks as `agent_workflow` episodes: an agent written with the `openai` client
          (`talk_agent`, one thread per episode) plays the same environment turn by turn through
          the endpoint, every call a chat completion over loopback HTTP, batched with the other
          episodes' calls by the same request batcher.

Measurements alternate, single first and last (`--rounds` agent runs between `--rounds + 1` single
runs), so a change of machine load hits both alike; the ratio compares the best run of each side,
as load from other processes only ever slows a run down. Prints the rates and, last,
`FIGURES agent_vs_single_turn=… agent_tokens_per_s=… endpoint_vs_env_workflow=… endpoint_tokens_per_s=…
endpoint_ms_per_call=…` (the targets: agent_vs_single_turn >= 0.8, endpoint_vs_env_workflow >= 0.8), the last
the time each call through the endpoint adds, whatever the model: the two best runs' difference over the calls.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Talk:
    """A fixed-length conversation: `turns` steps, each observation a short line; reward 1 at the end."""

    def __init__(self, *, turns: int = 4) -> None:
        self.turns = turns

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.steps = 0
        return f"Room {seed}: tell me where to go next.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        done = self.steps >= self.turns
        return f"You said {len(action)} characters; step {self.steps}.", float(done), done, False, {"success": done}

    def close(self) -> None:
        """Nothing to release."""


_TLS: list[Any] = []
"""One TLS context for every episode's HTTP client: an `openai` client that builds its own (loading the CA
bundle) costs ~20 ms of CPU, as much as an episode's four turns on the tiny model (docs/agents.md)."""


def talk_agent(base_url: str, api_key: str, task: dict[str, Any], *, turns: int, tokens: int) -> float:
    """`Talk` played through the policy's endpoint with the `openai` client, as a user's agent would."""
    import ssl

    import httpx
    from openai import OpenAI

    if not _TLS:
        _TLS.append(ssl.create_default_context())
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=httpx.Client(verify=_TLS[0]))
    env = Talk(turns=turns)
    observation, _ = env.reset(seed=task["index"])
    messages = [{"role": "user", "content": observation}]
    reward = 0.0
    for _ in range(turns):
        reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=tokens)
        text = reply.choices[0].message.content or ""
        observation, reward, done, _, _ = env.step(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": observation}]
        if done:
            break
    return reward


class Recorder:
    """The engine, keeping each `generate_batch` call's requests and counting the tokens generated."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.max_model_len = engine.max_model_len
        self.calls: list[list[Any]] = []
        self.tokens = 0

    def generate_batch(self, requests: Sequence[Any]) -> list[list[Any]]:
        """Generate, recording the requests and the tokens."""
        self.calls.append(list(requests))
        out = self.engine.generate_batch(requests)
        self.tokens += sum(len(c.token_ids) for group in out for c in group)
        return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=16, help="tasks (environment seeds) in flight")
    p.add_argument("--repeat", type=int, default=4, help="episodes per task (repeat_times)")
    p.add_argument("--turns", type=int, default=4, help="policy turns per episode")
    p.add_argument("--tokens-per-turn", type=int, default=16, help="tokens of every reply")
    p.add_argument("--engine", choices=("vllm", "transformers"), default="vllm")
    p.add_argument("--rounds", type=int, default=2, help="agent runs, each between two single-turn runs")
    p.add_argument("--model", type=Path, default=None, help="model directory (default: build bench30m)")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    from rfthpc.demos.tinymodel import build_tiny_model
    from rfthpc.engines import EngineSettings, make_engine
    from rfthpc.engines.batching import RequestBatcher
    from rfthpc.engines.sampling import SamplingArgs
    from rfthpc.explorer.rollout import RolloutPolicy, run_tasks
    from rfthpc.signals import StopRequest
    from rfthpc.tasks.tasksets import PromptBuilder, Task
    from rfthpc.workflows.base import WorkflowContext

    work = Path(tempfile.mkdtemp(prefix="bench_agent_"))
    model = args.model or build_tiny_model(work / "bench30m", "bench30m", seed=0)
    n = args.tokens_per_turn
    engine = make_engine(args.engine, EngineSettings(str(model), max_model_len=2048, seed=0, min_response_tokens=n,
                                                     cpu_kvcache_space_gb=1))
    from transformers import AutoTokenizer

    prompts = PromptBuilder(AutoTokenizer.from_pretrained(str(model)))
    env = f"{Path(__file__).resolve()}:Talk"
    tasks = [Task(task_id=f"talk/{i}", taskset="talk", index=i, raw={}, prompt="", truth=None,
                  workflow="env_workflow", reward_fn=None, workflow_args={"env": env, "env_args": {"turns": args.turns},
                                                                         "max_turns": args.turns},
                  rollout_args=SamplingArgs(temperature=1.0, max_tokens=n), repeat_times=args.repeat)
             for i in range(args.tasks)]

    agent_tasks = [dataclasses.replace(t, workflow="agent_workflow", workflow_args={
        "agent": f"{Path(__file__).resolve()}:talk_agent", "agent_args": {"turns": args.turns, "tokens": n},
        "isolation": "thread", "timeout_s": 3600}) for t in tasks]

    def agent(played: list[Task] = tasks) -> tuple[int, float, list[list[Any]]]:
        recorder = Recorder(engine)
        batcher = RequestBatcher({"policy": recorder})
        ctx = WorkflowContext(engine=batcher.client("policy"), prompts=prompts)
        began = time.perf_counter()
        outcomes = run_tasks(played, ctx, batcher, RolloutPolicy(concurrency=args.tasks), StopRequest())
        seconds = time.perf_counter() - began
        assert all(o.result is not None and not o.result.info.get("failed_episodes") for o in outcomes), [
            o.error or o.result.info for o in outcomes]
        return recorder.tokens, seconds, recorder.calls

    def single(calls: list[list[Any]]) -> tuple[int, float]:
        recorder = Recorder(engine)
        began = time.perf_counter()
        for requests in calls:
            recorder.generate_batch(requests)
        return recorder.tokens, time.perf_counter() - began

    _, _, calls = agent()  # warm-up, and the requests the single-turn side replays
    agent(agent_tasks)  # the endpoint's warm-up: its server starts with the first agent task
    rate = {"agent": 0.0, "single": 0.0, "endpoint": 0.0}
    runs = {"single": lambda: single(calls), "agent": lambda: agent()[:2], "endpoint": lambda: agent(agent_tasks)[:2]}
    for side in ["single", *(s for _ in range(args.rounds) for s in ("agent", "endpoint", "single"))]:
        tokens, seconds = runs[side]()
        rate[side] = max(rate[side], tokens / seconds)
        print(f"{side:8s} {tokens:7d} tokens {seconds:7.2f} s {tokens / seconds:9.1f} tokens/s", flush=True)
    print(f"engine {args.engine}, {args.tasks} tasks x {args.repeat} episodes x {args.turns} turns x {n} tokens; "
          f"{len(calls)} engine calls per agent run")
    # Every reply is n tokens: the time the endpoint adds per token, times n, is what it adds per call.
    added_ms = (1 / rate["endpoint"] - 1 / rate["agent"]) * n * 1000
    print(f"FIGURES agent_vs_single_turn={rate['agent'] / rate['single']:.3f} agent_tokens_per_s={rate['agent']:.1f} "
          f"endpoint_vs_env_workflow={rate['endpoint'] / rate['agent']:.3f} "
          f"endpoint_tokens_per_s={rate['endpoint']:.1f} endpoint_ms_per_call={added_ms:.2f}")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
