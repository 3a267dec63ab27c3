"""Strict conversion of plain YAML data into the typed config dataclasses.

Every problem is collected (unknown keys with the closest valid key, wrong types, bad choices)
and reported together in one `ConfigError`, each naming the full dotted path and the source.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from rfthpc.config import compat
from rfthpc.errors import ConfigError

T = TypeVar("T")


class Problems:
    """Accumulates config problems so the user sees all of them at once."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []

    def add(self, message: str) -> None:
        """Record one problem."""
        self.items.append(message)

    def raise_if_any(self) -> None:
        """Raise a ConfigError listing every recorded problem."""
        if self.items:
            lines = "\n".join(f"  - {m}" for m in self.items)
            raise ConfigError(f"invalid config ({self.source}):\n{lines}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp) if a is not type(None)) + " or null"
    if origin is list:
        return f"a list of {_describe(get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def convert(tp: Any, value: Any, path: str, problems: Problems) -> Any:
    """Convert `value` to type `tp`, recording a problem (and returning None) when it does not fit."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return convert(args[0], value, path, problems)
    if origin is Literal:
        choices = get_args(tp)
        if value in choices:
            return value
        text = str(value).lower() if isinstance(value, str) else value
        if text in choices:
            return text
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        problems.add(f"{path}: {value!r} is not one of {', '.join(repr(c) for c in choices)}{hint}")
        return None
    if origin is list:
        (item_tp,) = get_args(tp)
        if value is None:
            return []
        if not isinstance(value, list):
            if dataclasses.is_dataclass(item_tp) or isinstance(value, dict):
                problems.add(f"{path}: expected {_describe(tp)}, got {type(value).__name__}")
                return []
            value = [value]  # A single scalar where a list is allowed (e.g. monitor_type: wandb).
        return [convert(item_tp, v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            problems.add(f"{path}: expected a mapping, got {type(value).__name__} {value!r}")
            return {}
        value_tp = get_args(tp)[1] if get_args(tp) else Any
        if value_tp is Any:
            return dict(value)
        converted = {str(k): convert(value_tp, v, f"{path}.{k}", problems) for k, v in value.items()}
        return {k: v for k, v in converted.items() if v is not None}
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path, problems)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        problems.add(f"{path}: expected true or false, got {value!r}")
        return None
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        problems.add(f"{path}: expected an integer, got {value!r}")
        return None
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        problems.add(f"{path}: expected a number, got {value!r}")
        return None
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        problems.add(f"{path}: expected a string, got {value!r}")
        return None
    raise TypeError(f"config field {path} has an unsupported annotation {tp!r}")


def build(cls: type[T], data: Any, path: str, problems: Problems) -> T:
    """Build dataclass `cls` from a mapping, checking every key against its fields."""
    if data is None:
        return cls()
    if not isinstance(data, dict):
        problems.add(f"{path or 'top level'}: expected a mapping, got {type(data).__name__} {data!r}")
        return cls()
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key)
        full = _join(path, key)
        if key not in names:
            reason = compat.unsupported_reason(full)
            if reason:
                problems.add(f"{full}: Trinity-RFT key not supported by rfthpc: {reason}")
                continue
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f"; did you mean '{_join(path, close[0])}'?" if close else ""
            problems.add(f"{full}: unknown key{hint} (valid keys here: {', '.join(names)})")
            continue
        converted = convert(hints[key], value, full, problems)
        if converted is not None:
            kwargs[key] = converted
    return cls(**kwargs)


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain data (for YAML output and for merging stage overrides)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj
