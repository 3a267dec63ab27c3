"""Name → function registries for the pieces of an RL algorithm.

Each configurable piece (advantage, policy loss, KL estimator, entropy bonus) is a plain function
registered under one or more names. A config names it (`algorithm.advantage_fn: grpo`) or points at
a user's own function as `module:function` (`algorithm.advantage_fn: my_pkg.adv:shaped`), which must
follow the same call convention as the built-in ones.

Tunable arguments of a registered function are its keyword-only parameters (after `*`): they are what
`<key>_args` in the config may set, and `Registry.bind` checks the names before the run starts.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from rfthpc.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


def load_user_function(spec: str, config_key: str) -> Callable[..., Any]:
    """Import the function a config names as `module:function`.

    Raises ConfigError naming the config key when the module cannot be imported, lacks the
    attribute, or the attribute is not callable.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{config_key}: {spec!r} must look like 'package.module:function'.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"{config_key}: cannot import module {module_name!r} for {spec!r} ({exc}); "
            "install it or put its directory on PYTHONPATH."
        ) from exc
    fn = getattr(module, attr, None)
    if fn is None:
        raise ConfigError(f"{config_key}: module {module_name!r} has no attribute {attr!r}; fix the name in {spec!r}.")
    if not callable(fn):
        raise ConfigError(f"{config_key}: {spec!r} is not a function; point it at a callable.")
    return fn


def tunable_args(fn: Callable[..., Any]) -> dict[str, Any]:
    """The keyword-only parameters of `fn` with their defaults (`inspect.Parameter.empty` if none)."""
    params = inspect.signature(fn).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def check_args(fn: Callable[..., Any], args: Mapping[str, Any], config_key: str, label: str) -> None:
    """Raise ConfigError if `args` holds a name that `fn` does not take as a keyword-only argument.

    A function with `**kwargs` accepts any name.
    """
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    known = tunable_args(fn)
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise ConfigError(
            f"{config_key}: {', '.join(map(repr, unknown))} not accepted by {label}; "
            f"accepted: {', '.join(sorted(known)) or '(none)'}."
        )


class Registry(Generic[F]):
    """Functions of one kind, selectable by name or by `module:function`."""

    def __init__(self, kind: str, config_key: str) -> None:
        """A registry of `kind` functions (for messages) chosen by the config key `config_key`.

        Example: Registry("advantage function", "algorithm.advantage_fn").
        """
        self.kind = kind
        self.config_key = config_key
        self._fns: dict[str, F] = {}

    def register(self, name: str, *aliases: str) -> Callable[[F], F]:
        """Decorator registering a function under `name` and any `aliases`."""

        def decorator(fn: F) -> F:
            for key in (name, *aliases):
                if key in self._fns:
                    raise ValueError(f"{self.kind} {key!r} is registered twice")
                self._fns[key] = fn
            return fn

        return decorator

    def names(self) -> list[str]:
        """All registered names, aliases included, sorted."""
        return sorted(self._fns)

    def get(self, name: str) -> F:
        """The function registered as `name`, or the user function `name` = `module:function`."""
        if name in self._fns:
            return self._fns[name]
        if ":" in name:
            return load_user_function(name, self.config_key)  # type: ignore[return-value]
        raise ConfigError(
            f"{self.config_key}: unknown {self.kind} {name!r}; known: {', '.join(self.names())} "
            "(or your own function as 'module:function')."
        )

    def defaults(self, name: str) -> dict[str, Any]:
        """The tunable arguments of `name` with their default values."""
        return tunable_args(self.get(name))

    def bind(self, name: str, args: Mapping[str, Any] | None = None) -> F:
        """`get(name)` with `args` bound as keyword arguments, after checking their names."""
        fn = self.get(name)
        args = dict(args or {})
        check_args(fn, args, f"{self.config_key}_args", f"{self.kind} {name!r}")
        return functools.partial(fn, **args)  # type: ignore[return-value]
