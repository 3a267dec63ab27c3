"""Checking an environment's constructor arguments, so a bad value is a ConfigError naming its key.

An environment's arguments come from `workflow_args.env_args` of the taskset, overridden by the task
row's `env_args`; a value that came from YAML or a dataset row may be of any type.
"""

from __future__ import annotations

import math
from typing import Any

from rfthpc.errors import ConfigError

ENV_ARGS_KEY = "workflow_args.env_args"


def bad_arg(name: str, value: Any, fix: str) -> ConfigError:
    """The error for argument `name` = `value`: `fix` says what it must be."""
    return ConfigError(f"{ENV_ARGS_KEY}.{name}: {value!r} {fix}")


def int_arg(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """`value` as an int within [minimum, maximum]."""
    # A bool is an int to Python, but `size: true` is a mistake.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
            maximum is not None and value > maximum):
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise bad_arg(name, value, f"must be an integer >= {minimum}{upper}")
    return value


def float_arg(name: str, value: Any, low: float, high: float) -> float:
    """`value` as a float within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not (
            low <= value <= high):
        raise bad_arg(name, value, f"must be a number in [{low}, {high}]")
    return float(value)


def bool_arg(name: str, value: Any) -> bool:
    """`value` as a bool (only true or false, not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise bad_arg(name, value, "must be true or false")
    return value


def rows_problem(value: Any, cells: str) -> str | None:
    """What `value` must be to be a rectangular grid (a list of equally long strings of the characters
    `cells`), or None if it is one."""
    if (not isinstance(value, (list, tuple)) or len(value) < 2 or not all(isinstance(r, str) for r in value)
            or len({len(r) for r in value}) != 1 or len(value[0]) < 2
            or any(c not in cells for r in value for c in r)):
        return f"must be a list of at least 2 equally long strings (rows) of the characters {' '.join(cells)}"
    return None


def rows_arg(name: str, value: Any, cells: str) -> list[str]:
    """`value` as a rectangular grid: a list of equally long strings of the characters `cells`."""
    problem = rows_problem(value, cells)
    if problem:
        raise bad_arg(name, value, problem)
    return list(value)


LAKE_CELLS = "SFHG"
"""gymnasium's FrozenLake letters: start, frozen, hole, goal."""


def lake_map_problem(value: Any) -> str | None:
    """What `value` must be to be a FrozenLake map in gymnasium's letters (one start, a goal), or None
    if it is one. Pure, so a config check can call it without importing gymnasium."""
    problem = rows_problem(value, LAKE_CELLS)
    if problem:
        return problem
    cells = "".join(value)
    if cells.count("S") != 1 or "G" not in cells:
        return "must hold exactly one start S and at least one goal G"
    return None


def lake_map_arg(name: str, value: Any) -> list[str]:
    """`value` as a FrozenLake map (rows of S, F, H, G with exactly one S and at least one G)."""
    problem = lake_map_problem(value)
    if problem:
        raise bad_arg(name, value, problem)
    return list(value)
