"""Environments by name: `make_env("module:Class", args)`, and their arguments checked before a run.

`workflow_args.env` names a built-in environment or the user's own class as `package.module:Class`
or `/path/to/file.py:Class`; `workflow_args.env_args` (overridden per task by the row's `env_args`)
are its keyword arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rfthpc.envs.base import TextEnv
from rfthpc.errors import ConfigError
from rfthpc.registry import Registry

ENVS: Registry[Any] = Registry("environment", "workflow_args.env", {})


def make_env(name: str, args: Mapping[str, Any]) -> TextEnv:
    """A new environment `name` built with keyword arguments `args`."""
    ENVS.check(name, args)
    return ENVS.get(name)(**args)


def check_env(name: str, args: Mapping[str, Any]) -> list[str]:
    """What is wrong with environment `name` and its arguments (empty: nothing), each naming the key."""
    try:
        ENVS.check(name, args)
    except ConfigError as e:
        return [str(e)]
    return []
