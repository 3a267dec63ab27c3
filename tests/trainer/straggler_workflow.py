"""A workflow (given to the explorer as user code) whose first task waits for the trainer.

Task 0 holds its explorer until `trainer_meta.json` in `workflow_args["run_dir"]` reports step
`workflow_args["until_step"]`, so its group, generated with the policy of its claim time, reaches
the trainer older than the staleness bound allows and is dropped. Every task is one turn with
reward 1.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rfthpc.workflows.base import Experience, WorkflowResult

TIMEOUT_S = 600.0


def _trainer_step(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "trainer_meta.json").read_text())["step"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def straggler(task, ctx) -> WorkflowResult:
    """Generate `repeat_times` responses; task 0 first waits for the trainer's step `until_step`."""
    prompt = ctx.prompts.encode(ctx.prompts.messages(task))
    completions = ctx.engine.generate([prompt.token_ids], task.repeat_times, task.rollout_args)[0]
    if task.index == 0:
        deadline = time.monotonic() + TIMEOUT_S
        while _trainer_step(Path(task.workflow_args["run_dir"])) < task.workflow_args["until_step"]:
            if time.monotonic() > deadline:
                raise TimeoutError("the trainer did not reach its step")
            time.sleep(0.2)
    return WorkflowResult([Experience.from_completion(prompt.token_ids, c, 1.0) for c in completions])
