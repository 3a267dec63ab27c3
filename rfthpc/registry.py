"""Registries of named functions, selectable from a config by name or as user code.

A config names a built-in (`grpo`, `math_workflow`, `math_reward`) or the user's own function:
`my_pkg.module:function` (importable on every node) or `/path/to/file.py:function`. An unknown
name is a ConfigError naming the config key and listing the known names; a Trinity-RFT name rfthpc has not
built yet is one saying what it is and what comes closest (`rfthpc.not_built`).

A registry declares its built-ins as a table, name → "module:function", and imports a module only
when one of its functions is used. So a config is checked without importing what the functions
need (the algorithm functions import torch, which takes seconds): `Registry.check` reads a
built-in's parameters from its module's source.

Tunable arguments of a registered function are its keyword-only parameters (after `*`): they are
what `<key>_args` in the config may set, and `Registry.check` and `bind` check their names before
a run starts. A registry may hold classes instead (the environments): their arguments are the
keyword-only parameters of their `__init__`, which a built-in class must define itself.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from rfthpc.errors import ALGORITHM, REFUSED, ConfigError, Problems
from rfthpc.not_built import is_module_path, not_built

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


def accepted_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The names `fn` takes as keyword-only arguments; None if it takes any name (`**kwargs`)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(tunable_args(fn))


@functools.cache
def _module_definitions(module: str) -> dict[str, ast.FunctionDef | ast.ClassDef]:
    """The top-level function and class definitions of `module`, parsed from its source, which is not run."""
    spec = importlib.util.find_spec(module)
    source = spec.loader.get_source(module) if spec is not None and spec.loader is not None else None
    if source is None:
        raise LookupError(f"no Python source for module {module!r}")
    return {node.name: node for node in ast.parse(source).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def _signature_node(target: str) -> ast.FunctionDef:
    """The definition whose parameters `target` takes: a function's own, or a class's `__init__`."""
    module, _, name = target.partition(":")
    node = _module_definitions(module).get(name)
    if node is None:
        raise LookupError(f"module {module!r} has no top-level `def {name}` or `class {name}` "
                          f"(named by the built-in {target!r})")
    if isinstance(node, ast.FunctionDef):
        return node
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        # An inherited __init__ lies in another module, so the source of this one cannot tell.
        raise LookupError(f"class {name!r} of module {module!r} defines no `__init__` of its own "
                          f"(named by the built-in {target!r}); a built-in class must")
    return init


def source_keywords(target: str) -> frozenset[str] | None:
    """`accepted_keywords` of the function or class `target` = "module:name" (a class: its `__init__`),
    read from the module's source without importing the module (and what it imports)."""
    node = _signature_node(target)
    if node.args.kwarg is not None:
        return None
    return frozenset(arg.arg for arg in node.args.kwonlyargs)


def source_defaults(target: str) -> dict[str, Any]:
    """The keyword-only parameters of the function `target` = "module:name" whose defaults are literals,
    with those defaults, read from the module's source without importing it."""
    node = _signature_node(target)
    found = {}
    for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
        if default is None:
            continue
        try:
            found[arg.arg] = ast.literal_eval(default)
        except ValueError:
            continue  # a computed default: the function's own check sees it at run time
    return found


def check_keywords(accepted: frozenset[str] | None, args: Mapping[str, Any], config_key: str, label: str) -> None:
    """Raise ConfigError if `args` holds a name outside `accepted` (None accepts every name)."""
    if accepted is None:
        return
    unknown = sorted(set(args) - accepted)
    if unknown:
        raise ConfigError(
            f"{config_key}: {', '.join(map(repr, unknown))} not accepted by {label}; "
            f"accepted: {', '.join(sorted(accepted)) or '(none)'}."
        )


class Registry(Generic[F]):
    """Functions of one kind, selectable by a built-in name or by `module:function`."""

    def __init__(self, kind: str, config_key: str,
                 builtins: Mapping[str, str] | Callable[[], Mapping[str, str]],
                 user_code: str = "your own function as 'module:function'", module_paths: str | None = None) -> None:
        """`kind` names the functions in messages ("advantage function"), `config_key` the config key
        that selects one; `builtins` maps each built-in name (aliases too) to "module:function", or is
        a function returning that map (called once, when the registry is first used); `user_code` says
        in messages how a user names their own (a registry of classes: "your own class as 'module:Class'");
        `module_paths`, "module:factory", serves a name that is a module path (`pkg.module.Class`, a
        Trinity-RFT plugin class) with `factory(name)` (None: such a name is refused, `rfthpc.not_built`)."""
        self.kind = kind
        self.config_key = config_key
        self.user_code = user_code
        self._module_paths = module_paths
        self._source = builtins
        self._table: dict[str, str] | None = None

    @property
    def _builtins(self) -> dict[str, str]:
        if self._table is None:
            self._table = dict(self._source() if callable(self._source) else self._source)
        return self._table

    def names(self) -> list[str]:
        """All built-in names, aliases included, sorted."""
        return sorted(self._builtins)

    def get(self, name: str) -> F:
        """The built-in function `name` (importing its module), or the user function `name` = `module:function`."""
        target = self._builtins.get(name)
        if target is not None:
            module, _, attr = target.partition(":")
            return getattr(importlib.import_module(module), attr)
        if self._module_paths is not None and is_module_path(name):
            module, _, attr = self._module_paths.partition(":")
            return getattr(importlib.import_module(module), attr)(name)
        refusal = not_built(self.kind, name)
        if refusal is not None:
            raise ConfigError(f"{self.config_key}: {refusal}")
        if ":" in name:
            return load_user_function(name, self.config_key)  # type: ignore[return-value]
        raise ConfigError(
            f"{self.config_key}: unknown {self.kind} {name!r}; known: {', '.join(self.names())} "
            f"(or {self.user_code})."
        )

    def check(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        """Raise ConfigError unless `name` selects a function that takes every key of `args` as a
        keyword argument. A built-in is checked from its source without importing its module; a user
        function is imported (so a broken one is reported before a run starts)."""
        target = self._builtins.get(name)
        accepted = source_keywords(target) if target is not None else accepted_keywords(self.get(name))
        check_keywords(accepted, args or {}, f"{self.config_key}_args", f"{self.kind} {name!r}")

    def report(self, problems: Problems, key: str, name: str | None, args: Mapping[str, Any] | None = None,
               kind: str = ALGORITHM) -> None:
        """`check`, recording the problem (of `kind`, named by the config key `key`) instead of raising;
        nothing for an unset name."""
        if not name:
            return
        refusal = not_built(self.kind, name)
        if refusal is not None:
            # A Trinity-RFT feature rfthpc lacks is refused, not a misspelt name to fix.
            problems.add(f"{key}: {refusal}", REFUSED)
            return
        try:
            self.check(name, args)
        except ConfigError as e:
            message = str(e)
            problems.add(message if message.startswith(f"{self.config_key}_args")
                         else f"{key}: {message.removeprefix(self.config_key + ': ')}", kind)

    def defaults(self, name: str) -> dict[str, Any]:
        """The tunable arguments of `name` with their default values."""
        return tunable_args(self.get(name))

    def bind(self, name: str, args: Mapping[str, Any] | None = None) -> F:
        """`get(name)` with `args` bound as keyword arguments, after checking their names."""
        fn = self.get(name)
        args = dict(args or {})
        check_keywords(accepted_keywords(fn), args, f"{self.config_key}_args", f"{self.kind} {name!r}")
        return functools.partial(fn, **args)  # type: ignore[return-value]
