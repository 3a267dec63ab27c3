"""Registries of named functions, selectable from a config by name or as user code.

A config names a built-in (`grpo`, `math_workflow`, `math_reward`) or the user's own function:
`my_pkg.module:function` (importable on every node) or `/path/to/file.py:function`. An unknown
name is a ConfigError naming the config key and listing the known names.

Tunable arguments of a registered function are its keyword-only parameters (after `*`): they are
what `<key>_args` in the config may set, and `Registry.bind` checks their names before a run starts.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from rfthpc.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


def _import_file(path: Path) -> Any:
    unique = "rfthpc_user_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module = sys.modules.get(unique)
    if module is None:
        spec = importlib.util.spec_from_file_location(unique, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[unique] = module
    return module


def load_user_function(spec: str, config_key: str) -> Callable[..., Any]:
    """Import the function a config names as `module:function` or `file.py:function`."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise ConfigError(f"{config_key}: {spec!r} must look like 'package.module:function' or 'file.py:function'")
    if module_name.endswith(".py"):
        path = Path(module_name).expanduser()
        if not path.is_file():
            raise ConfigError(f"{config_key}: file {path} does not exist; give a path readable on every node")
        module = _import_file(path)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ConfigError(
                f"{config_key}: cannot import module {module_name!r} for {spec!r} ({e}); install it or put its "
                "directory on PYTHONPATH of the jobs (compute nodes import it too)"
            ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{config_key}: module {module_name!r} has no callable {attr!r}; fix the name in {spec!r}")
    return fn


def tunable_args(fn: Callable[..., Any]) -> dict[str, Any]:
    """The keyword-only parameters of `fn` with their defaults (`inspect.Parameter.empty` if none)."""
    params = inspect.signature(fn).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def check_args(fn: Callable[..., Any], args: Mapping[str, Any], config_key: str, label: str) -> None:
    """Raise ConfigError if `args` holds a name `fn` does not take as keyword-only (`**kwargs` takes any)."""
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

    def __init__(self, kind: str, config_key: str, builtin_modules: Sequence[str] = ()) -> None:
        """`kind` names the functions in messages ("advantage function"), `config_key` the config key
        that selects one; `builtin_modules` register their functions when imported, on first lookup."""
        self.kind = kind
        self.config_key = config_key
        self._builtin_modules = tuple(builtin_modules)
        self._loaded = not self._builtin_modules
        self._loading = threading.RLock()
        self._fns: dict[str, F] = {}

    def register(self, name: str, *aliases: str) -> Callable[[F], F]:
        """Decorator registering a function under `name` and any `aliases`."""

        def decorator(fn: F) -> F:
            for key in (name, *aliases):
                if key in self._fns and self._fns[key] is not fn:
                    raise ValueError(f"{self.kind} {key!r} is registered twice")
                self._fns[key] = fn
            return fn

        return decorator

    def _load_builtins(self) -> None:
        # Imported on first lookup, not at import time, so a registry and the modules that fill it
        # can import each other without a cycle. Workflow threads may look up concurrently: the
        # flag is set only once every built-in has registered.
        if self._loaded:
            return
        with self._loading:
            if not self._loaded:
                for module in self._builtin_modules:
                    importlib.import_module(module)
                self._loaded = True

    def names(self) -> list[str]:
        """All registered names, aliases included, sorted."""
        self._load_builtins()
        return sorted(self._fns)

    def get(self, name: str) -> F:
        """The function registered as `name`, or the user function `name` = `module:function`."""
        self._load_builtins()
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
