"""Fixtures of the multi-turn workflow tests: the tiny model, a scripted engine, tasks of the toy environment."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.tasks.tasksets import PromptBuilder, Task
from rfthpc.workflows.base import WorkflowContext

LINE_WALK = "tests.workflows.toy_envs:LineWalk"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tied-embedding `tiny` Qwen2 with a Qwen-style chat template."""
    from rfthpc.demos.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"), "tiny", seed=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_model: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


class ScriptedEngine:
    """A RolloutEngine whose replies are given texts: `script(context ids, episode's turn)` -> text.

    A reply is the text's ids plus the end token, cut at `max_tokens` (then finish_reason "length",
    no end token); every token's logprob is -0.25. Each call is recorded as (prompts, n, params)."""

    LOGPROB = -0.25

    def __init__(self, tokenizer: Any, script: Callable[[list[int]], str], max_model_len: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.script = script
        self.calls: list[tuple[list[list[int]], int, SamplingArgs]] = []

    def reply(self, context: list[int], params: SamplingArgs) -> Completion:
        ids = self.tokenizer.encode(self.script(context), add_special_tokens=False) + [self.tokenizer.eos_token_id]
        cut = len(ids) > params.max_tokens
        ids = ids[:params.max_tokens]
        return Completion(ids, [self.LOGPROB] * len(ids), self.tokenizer.decode(ids, skip_special_tokens=True),
                          "length" if cut else "stop")

    def generate(self, prompts_token_ids: Sequence[Sequence[int]], n: int,
                 params: SamplingArgs) -> list[list[Completion]]:
        self.calls.append(([list(p) for p in prompts_token_ids], n, params))
        return [[self.reply(list(p), params) for _ in range(n)] for p in prompts_token_ids]


def env_task(index: int = 0, repeat: int = 1, raw: dict[str, Any] | None = None, max_tokens: int = 16,
             system_prompt: str | None = None, **workflow_args: Any) -> Task:
    """A task of `env_workflow` on the LineWalk environment (workflow_args as given)."""
    return Task(
        task_id=f"walk/{index}", taskset="walk", index=index, raw=raw or {}, prompt="", truth=None,
        workflow="env_workflow", reward_fn=None, workflow_args={"env": LINE_WALK, **workflow_args},
        rollout_args=SamplingArgs(temperature=1.0, max_tokens=max_tokens), repeat_times=repeat,
        system_prompt=system_prompt,
    )


def context(engine: Any, tokenizer: Any) -> WorkflowContext:
    """The workflow context of `engine` with the tiny model's prompt builder."""
    return WorkflowContext(engine=engine, prompts=PromptBuilder(tokenizer))
