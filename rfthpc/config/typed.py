"""Strict conversion of plain YAML data into the typed config dataclasses.

Every problem is collected in a `rfthpc.errors.Problems` (unknown keys with the closest valid key,
wrong types, bad choices, and the later phases' findings) and reported together in one
`ConfigError`, grouped by kind, each naming the full dotted path; the error names the source. A key
of another framework that rfthpc ignores is a note instead (`rfthpc.dialects`).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from rfthpc.dialects import mapping, trinity
from rfthpc.errors import UNKNOWN, Problems

T = TypeVar("T")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        null = " or null" if type(None) in get_args(tp) else ""
        return " or ".join(_describe(a) for a in get_args(tp) if a is not type(None)) + null
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
        # A list or a single value (`target_modules: all-linear` or `[q_proj, v_proj]`): read it as the
        # alternative of its own kind.
        kind = [a for a in args if (get_origin(a) is list) == isinstance(value, list)]
        return convert((kind or args)[0], value, path, problems)
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
        items = [convert(item_tp, v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
        return [item for item in items if item is not None]  # (each None is a problem recorded)
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
            found = mapping.answer(trinity.TRINITY_KEYS, trinity.trinity_key(full), value, data)
            if isinstance(found, mapping.Ignored):
                problems.ignored(full, found.why)
                continue
            if isinstance(found, mapping.Refused):
                problems.refuse(full, "Trinity-RFT", found.why)
                continue
            close = mapping.close_name(key, names)
            hint = f"; did you mean '{_join(path, close)}'?" if close else ""
            problems.add(f"{full}: unknown key{hint} (valid keys here: {', '.join(names)})", UNKNOWN)
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
