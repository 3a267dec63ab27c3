"""veRL's rule-based reward, row by row: `verl_reward`, the reward of configs imported from veRL.

veRL scores a response with `default_compute_score(data_source, solution_str, ground_truth, extra_info)`,
which picks a scorer by the row's data source (the column `data.reward_fn_key` names, `data_source` by
default), or with the user's own function of that signature (`custom_reward_function.path` / `name`).
`verl_reward` does the same for each row: it reads the row's data source and scores with the rfthpc
reward function that reads and compares answers as veRL's scorer of that source does
(`rfthpc.dialects.verl_data.DATA_SOURCES`), or calls the user's veRL function (`compute_score`,
named as `file.py:function` or `module:function`). A row whose data source has no rfthpc scorer (`unscored`) fails its group: the
group gets rewards 0 and is marked, as any failing reward does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rfthpc.dialects.verl_data import DATA_SOURCES, unscored
from rfthpc.registry import load_user_function
from rfthpc.tasks.columns import column_value

if TYPE_CHECKING:
    from rfthpc.tasks.tasksets import Task





def _score(result: Any) -> float:
    """A veRL score: a number, or a mapping whose `score` is the reward (its other keys are veRL's metrics)."""
    return float(result["score"] if isinstance(result, Mapping) else result)


def verl_reward(response: str, truth: str | None, task: Task | None = None, *, data_source_key: str = "data_source",
                compute_score: str | None = None, reward_kwargs: Mapping[str, Any] | None = None
                ) -> dict[str, float]:
    """veRL's reward of one response to `task`: by the row's data source (the `data_source_key` column),
    `DATA_SOURCES`' rfthpc scorer; with `compute_score`, the user's veRL function
    `fn(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)` (the row's `extra_info`
    column, if it has one), whose score is the reward."""
    from rfthpc.rewards.registry import REWARDS

    if task is None:
        raise ValueError("verl_reward reads each row's data source, so it needs the task")
    try:
        source = column_value(task.raw, data_source_key)
    except KeyError:
        raise ValueError(f"the row has no {data_source_key!r} (veRL's data.reward_fn_key) naming its data "
                         "source") from None
    if compute_score:
        fn = load_user_function(compute_score, "reward_fn_args.compute_score")
        return {"score": _score(fn(data_source=source, solution_str=response, ground_truth=truth,
                                   extra_info=task.raw.get("extra_info"), **(reward_kwargs or {})))}
    why = unscored(str(source))
    if why is not None:
        raise ValueError(f"data source {source!r}: {why}; score it with your own veRL function (reward_fn_args "
                         "compute_score: file.py:function, veRL's custom_reward_function)")
    name, args = DATA_SOURCES[str(source)]
    return dict(REWARDS.get(name)(response=response, truth=truth, **args))
