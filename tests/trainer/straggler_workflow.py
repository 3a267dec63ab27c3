"""A workflow (given to the explorer as user code) whose first task waits for the trainer.

Task 0 holds its explorer until the trainer's report in `workflow_args["run_dir"]` says step
`workflow_args["until_step"]`, so its group, generated with the policy of its claim time, reaches
the trainer older than the staleness bound allows and is dropped. Every task is one turn with
reward 1.
"""

from __future__ import annotations

import time
from pathlib import Path

from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import read_trainer_meta
from rfthpc.workflows.base import Experience, WorkflowResult

TIMEOUT_S = 600.0


def _trainer_step(run_dir: Path) -> int:
    meta = read_trainer_meta(RunDir(run_dir))
    return 0 if meta is None else meta.step


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
