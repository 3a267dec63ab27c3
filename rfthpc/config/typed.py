"""Strict conversion of plain YAML data into the typed config dataclasses, and `Problems`, which
collects what every phase of loading a config finds.

Every problem is collected (unknown keys with the closest valid key, wrong types, bad choices, and
the later phases' findings) and reported together in one `ConfigError`, grouped by kind, each naming
the full dotted path; the error names the source. A key of another framework that rfthpc ignores is
a note instead (foreign.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from rfthpc.config import foreign
from rfthpc.errors import ConfigError

T = TypeVar("T")


UNKNOWN = "unknown keys"
REFUSED = "refused features"
INVALID = "invalid values"
ALGORITHM = "algorithm"
WORKFLOW = "workflow and reward"
GPUS = "GPU budget"
PATHS = "paths and datasets"
KINDS = (UNKNOWN, REFUSED, INVALID, ALGORITHM, WORKFLOW, GPUS, PATHS)
"""The kinds of config problems, in the order the error lists them."""


@dataclasses.dataclass(frozen=True)
class Mapped:
    """An rfthpc setting read from another framework's key (shown by `rfthpc config show`)."""

    target: str
    """The rfthpc key set."""
    value: Any
    """The value it was set to."""
    source: str
    """The key it was read from, as written in the config."""
    framework: str
    """Trinity-RFT, veRL or ROLL."""
    stage: str | None = None
    """The stage whose sections held the key; None for the run's config."""


@dataclasses.dataclass(frozen=True)
class _Problem:
    kind: str
    message: str
    stage: str | None
    key: str | None = None
    """A refused key: the keys refused for one reason share a line."""


class Problems:
    """What reading a config finds, collected so that the user sees all of it at once: problems of
    every phase and stage (raised together, by kind, in one `ConfigError`), notes for stderr, and the
    keys of other frameworks read as rfthpc keys.

    `for_stage(name)` gives a view that records into the same lists, marking each problem with the
    stage; a problem found in every stage is listed once, without a stage.
    """

    def __init__(self, source: str, stage: str | None = None, _root: Problems | None = None) -> None:
        self.source = source
        self.stage = stage
        root = self if _root is None else _root
        self._root = root
        if _root is None:
            self._items: list[_Problem] = []
            self.notes: list[str] = []
            self.mapped: list[Mapped] = []
            self.stages: list[str] = []
            self._ignored: dict[str, list[str]] = {}
            self._checks_from: int | None = None
            self._covered: set[str] = set()
        else:
            self.notes, self.mapped = root.notes, root.mapped

    @property
    def items(self) -> list[str]:
        """The messages recorded so far (every stage)."""
        return [f"{p.key}: {p.message}" if p.key else p.message for p in self._root._items]

    def add(self, message: str, kind: str = INVALID) -> None:
        """Record one problem of `kind` (one of KINDS), unless it is about a key a problem already
        recorded covers (`cover`)."""
        if _canonical(message.split(":", 1)[0]) in self._root._covered:
            return
        self._root._items.append(_Problem(kind, message, self.stage))

    def cover(self, key: str) -> None:
        """Note that the problem recorded about `key` covers it: its value could not be read and is
        unset, so a later check that finds it unset (`model.model_path: missing`) says nothing new."""
        self._root._covered.add(_canonical(key))

    def refuse(self, key: str, framework: str, why: str) -> None:
        """Record that `framework`'s `key` is refused, and why (with the alternative)."""
        message = f"{framework} key not supported by rfthpc: {why}"
        self._root._items.append(_Problem(REFUSED, message, self.stage, key))

    def extend(self, other: Problems, prefix: str = "") -> None:
        """Record the problems of `other` here, each message with `prefix`."""
        for p in other._root._items:
            self._root._items.append(dataclasses.replace(p, message=prefix + p.message, stage=self.stage))

    def for_stage(self, name: str) -> Problems:
        """A view recording the problems of stage `name`."""
        if name not in self._root.stages:
            self._root.stages.append(name)
        return Problems(self.source, name, self._root)

    def ignored(self, key: str, why: str) -> None:
        """Note a key rfthpc ignores and why; keys ignored for one reason share one note."""
        keys = self._root._ignored.setdefault(why, [])
        if key not in keys:
            keys.append(key)

    def ignored_keys(self) -> dict[str, list[str]]:
        """The keys rfthpc ignores, by reason (`ignored_notes` says the same in words)."""
        return {why: list(keys) for why, keys in self._root._ignored.items()}

    def ignored_notes(self) -> list[str]:
        """One note per reason for ignoring keys, naming the keys."""
        return [f"{', '.join(keys)}: ignored: {why}" for why, keys in self._root._ignored.items()]

    def map(self, target: str, value: Any, source: str, framework: str) -> None:
        """Record that the rfthpc key `target` was set to `value` from `framework`'s key `source`."""
        self.mapped.append(Mapped(target, value, source, framework, self.stage))

    def start_checks(self) -> None:
        """Mark the end of reading: problems from here on come from checks of the typed config."""
        self._root._checks_from = len(self._root._items)

    def __bool__(self) -> bool:
        return bool(self._root._items)

    def message(self) -> str:
        """Every problem, grouped by kind; one found in some stages only names them, and keys refused
        for one reason share a line."""
        root = self._root
        everywhere = set(root.stages)
        found: dict[tuple[str, str, str | None], list[str | None]] = {}
        for p in root._items:
            found.setdefault((p.kind, p.message, p.key), []).append(p.stage)
        lines: dict[str, list[str | tuple[str, str]]] = {}
        keys: dict[tuple[str, str], list[str]] = {}
        for (kind, message, key), stages in found.items():
            named = [s for s in dict.fromkeys(stages) if s is not None]
            where = "" if None in stages or set(named) == everywhere else \
                f"stage{'s' if len(named) > 1 else ''} {', '.join(repr(s) for s in named)}: "
            group = lines.setdefault(kind, [])
            if key is None:
                if where + message not in group:
                    group.append(where + message)
            elif (where, message) in keys:
                keys[where, message].append(key)
            else:
                keys[where, message] = [key]
                group.append((where, message))

        def text(line: str | tuple[str, str]) -> str:
            if isinstance(line, str):
                return line
            named = keys[line]
            message = line[1].replace(" key ", " keys ", 1) if len(named) > 1 else line[1]
            return f"{line[0]}{', '.join(named)}: {message}"

        count = sum(len(v) for v in lines.values())
        out = [f"invalid config ({self.source}): {count} problem{'s' if count > 1 else ''}"]
        for kind in sorted(lines, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS)):
            out.append(f"{kind}:")
            out += [f"  - {text(line)}" for line in lines[kind]]
        if root._checks_from is not None and 0 < root._checks_from < len(root._items):
            out.append("(the checks after reading ran on the rest of the config: a key or value that could not "
                       "be read was left at its default)")
        return "\n".join(out)

    def raise_if_any(self) -> None:
        """Raise a ConfigError listing every recorded problem."""
        if self._root._items:
            raise ConfigError(self.message())


def _canonical(key: str) -> str:
    """`key` as the checks of the finalized config name it: Trinity's single taskset is `tasksets[0]`."""
    return re.sub(r"^buffer\.explorer_input\.taskset\b", "buffer.explorer_input.tasksets[0]", key)


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
            found = foreign.answer(foreign.TRINITY_KEYS, foreign.trinity_key(full), value, data)
            if isinstance(found, foreign.Ignored):
                problems.ignored(full, found.why)
                continue
            if isinstance(found, foreign.Refused):
                problems.refuse(full, "Trinity-RFT", found.why)
                continue
            close = foreign.close_name(key, names)
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
