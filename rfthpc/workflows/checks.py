"""The checks `rfthpc config validate` asks of the workflows (`rfthpc.config.validate.COMPONENT_CHECKS`):
each taskset's workflow and reward function, their arguments and auxiliary models, and the dataset
columns the workflow reads.
"""

from __future__ import annotations

from rfthpc.algorithms.presets import trains_on_dataset
from rfthpc.config.buffer import TasksetConfig
from rfthpc.config.schema import Config, explores
from rfthpc.errors import PATHS, REFUSED, WORKFLOW, ConfigError, Problems
from rfthpc.not_built import REWARDS_ELSEWHERE, WORKFLOWS_ELSEWHERE
from rfthpc.rewards.registry import REWARDS
from rfthpc.rewards.scoring import check_reward_args
from rfthpc.tasks.columns import column_problem, dataset_columns, format_columns
from rfthpc.workflows.base import needs_of
from rfthpc.workflows.registry import WORKFLOWS, reads_text_columns


def workflow_problems(cfg: Config, problems: Problems) -> None:
    """Each taskset's (training and eval) workflow and reward function."""
    inp = cfg.buffer.explorer_input
    auxiliary = [aux.name for aux in cfg.explorer.auxiliary_models]
    for group, sets in (("tasksets", inp.tasksets), ("eval_tasksets", inp.eval_tasksets)):
        for i, ts in enumerate(sets):
            _taskset_problems(problems, f"buffer.explorer_input.{group}[{i}]", ts, auxiliary)


def _taskset_problems(problems: Problems, key: str, ts: TasksetConfig, auxiliary: list[str]) -> None:
    """The taskset's workflow and reward function exist and get the arguments, columns and auxiliary
    models (`auxiliary`: their names) they need."""
    before = len(problems.items)
    elsewhere = WORKFLOWS_ELSEWHERE.get(ts.default_workflow_type or "")
    if elsewhere:
        problems.add(f"{key}.default_workflow_type: {ts.default_workflow_type!r} {elsewhere}", REFUSED)
    else:
        WORKFLOWS.report(problems, f"{key}.default_workflow_type", ts.default_workflow_type, kind=WORKFLOW)
    elsewhere = REWARDS_ELSEWHERE.get(ts.default_reward_fn_type or "")
    if elsewhere:
        problems.add(f"{key}.default_reward_fn_type: {ts.default_reward_fn_type!r} {elsewhere}", REFUSED)
    else:
        REWARDS.report(problems, f"{key}.default_reward_fn_type", ts.default_reward_fn_type, kind=WORKFLOW)
    if len(problems.items) > before or not ts.default_workflow_type:
        return
    # The workflow is imported (workflows are light; a user's module:function is imported anyway).
    declared = needs_of(WORKFLOWS.get(ts.default_workflow_type))
    reward = ts.default_reward_fn_type
    if declared is not None:
        for name, why in declared.ignored.items():
            if name in ts.workflow_args:
                problems.ignored(f"{key}.workflow_args.{name}", why)
        for message in declared.problems(ts.default_workflow_type, ts.workflow_args, reward,
                                         ts.format.response_key is not None, auxiliary):
            problems.add(f"{key}.{message}", WORKFLOW)
        reward = declared.reward(reward)
    if reward is not None:
        try:
            check_reward_args(REWARDS.get(reward), reward, ts.reward_fn_args)
        except ConfigError as e:
            problems.add(f"{key}.{e}", WORKFLOW)


def column_problems(cfg: Config, problems: Problems, missing: set[str]) -> None:
    """Every column a `format` key names is in its dataset (read from the header: fast on a large file);
    `missing`: the path keys already reported missing."""
    inp, eb = cfg.buffer.explorer_input, cfg.buffer.trainer_input.experience_buffer
    sft = trains_on_dataset(cfg.algorithm.algorithm_type)
    datasets = []
    if explores(cfg.mode) and not sft:
        for group, sets in (("tasksets", inp.tasksets), ("eval_tasksets", inp.eval_tasksets)):
            datasets += [(f"buffer.explorer_input.{group}[{i}]", ts, format_columns(
                ts.format, text=reads_text_columns(ts.default_workflow_type, ts.format.workflow_key or None)))
                for i, ts in enumerate(sets)]
    if sft:
        datasets.append(("buffer.trainer_input.experience_buffer", eb,
                         format_columns(eb.format, sft=True, pairs=cfg.algorithm.algorithm_type == "dpo")))
    for key, ds, required in datasets:
        if f"{key}.path" in missing or not ds.path:
            continue
        for path in ds.path if isinstance(ds.path, list) else [ds.path]:
            columns = dataset_columns(path, ds.subset_name, ds.split)
            if columns is not None:
                problem = column_problem(f"{key} ({path}, split {ds.split!r})", columns, required)
                if problem:
                    problems.add(problem, PATHS)
