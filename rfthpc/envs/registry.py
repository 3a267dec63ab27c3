"""The environment registry: built-in text environments by name, or the user's class as `module:Class`.

A taskset of a multi-turn workflow names its environment in `workflow_args.env` and the constructor's
arguments in `workflow_args.env_args`; a task row's own `env_args` override those. `check_env` is what
a config check calls: it reads a built-in's arguments from its module's source, so validating a config
imports neither gymnasium nor anything else an environment needs (a user's class is imported, so a
broken one is reported before a run starts). `make_env` builds one environment for one episode;
`env_factory` checks the class and arguments once and builds those of a group's episodes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from rfthpc.envs.args import ENV_ARGS_KEY
from rfthpc.envs.base import TextEnv
from rfthpc.errors import ConfigError
from rfthpc.registry import Registry, accepted_keywords, check_keywords

ENV_KEY = "workflow_args.env"
ENVS: Registry[type[TextEnv]] = Registry("environment", ENV_KEY, {
    "frozen_lake": "rfthpc.envs.frozen_lake:FrozenLake",
    "sokoban": "rfthpc.envs.sokoban:Sokoban",
    "calculator": "rfthpc.envs.calculator:Calculator",
    "trinity_frozen_lake": "rfthpc.envs.trinity_frozen_lake:TrinityFrozenLake",
}, user_code="your own class as 'module:Class'")
_METHODS = ("reset", "step", "close")


def _not_an_env(name: str, cls: Any) -> str | None:
    """Why `cls` cannot be a text environment class, or None if it can."""
    missing = [m for m in _METHODS if not callable(getattr(cls, m, None))]
    if not inspect.isclass(cls) or missing:
        lacks = f"it has no {', '.join(f'{m}()' for m in missing)}" if missing else "it is not a class"
        return (f"{ENV_KEY}: {name!r} is not a text environment class ({lacks}); see rfthpc.envs.base.TextEnv "
                "for the interface")
    return None


def check_env(name: Any, args: Any = None) -> list[str]:
    """What is wrong with environment `name` and its arguments `args` (`workflow_args.env_args`), each
    naming the key and the fix; [] if nothing. A built-in's module is not imported. Arguments that only
    the task rows give cannot be missing here: they are checked when an episode's environment is made."""
    if not isinstance(name, str) or not name:
        return [(f"{ENV_KEY}: {name!r} is no environment; name one of {', '.join(ENVS.names())} or "
                 "your own class as 'module:Class'")]
    if args is not None and not isinstance(args, Mapping):
        return [f"{ENV_ARGS_KEY}: {args!r} must be a mapping of argument names to values"]
    try:
        ENVS.check(name, args)
    except ConfigError as e:
        return [str(e)]
    if name in ENVS.names():
        return []
    problem = _not_an_env(name, ENVS.get(name))
    return [problem] if problem else []


def env_factory(name: str, args: Mapping[str, Any] | None = None) -> Callable[[], TextEnv]:
    """What builds new environments `name` with the keyword arguments `args` (the taskset's `env_args`
    merged with the row's), checked once: a group's episodes each need one. ConfigError naming the
    key if an argument is unknown, missing or bad."""
    cls = ENVS.get(name)
    problem = _not_an_env(name, cls)
    if problem:
        raise ConfigError(problem)
    args = dict(args or {})
    check_keywords(accepted_keywords(cls), args, ENV_ARGS_KEY, f"environment {name!r}")
    params = inspect.signature(cls).parameters.values()
    missing = [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in args
               and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if missing:
        raise ConfigError(f"{ENV_ARGS_KEY}: environment {name!r} needs {', '.join(map(repr, missing))}; give "
                          "them in workflow_args.env_args or in every task row's env_args")
    return functools.partial(cls, **args)


def make_env(name: str, args: Mapping[str, Any] | None = None) -> TextEnv:
    """A new environment `name` built with the keyword arguments `args` (see `env_factory`)."""
    return env_factory(name, args)()
