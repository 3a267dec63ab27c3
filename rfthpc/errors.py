"""Errors a user can cause, and how the command line reports them.

A `UserError` carries a message that names the offending thing and the fix. The CLI prints it
without a traceback and exits with code 2; anything else that escapes is a bug and keeps its
traceback. A config's problems are collected by `Problems`, which reports them all at once, grouped
by kind, in one ConfigError.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """A problem in the user's input (config, paths, command line) rather than in rfthpc itself."""

    exit_code: int = USER_ERROR_EXIT_CODE


class ConfigError(UserError):
    """The configuration is invalid: unknown key, wrong type, missing or inconsistent value."""


class SlurmError(UserError):
    """Slurm refused a request or cannot be reached."""


EXIT_PREEMPTED = 124
"""Exit code of a role that stopped cleanly on SIGTERM/SIGUSR2 (preemption, time limit): requeue it."""


UNKNOWN = "unknown keys"
REFUSED = "refused features"
INVALID = "invalid values"
ALGORITHM = "algorithm"
WORKFLOW = "workflow and reward"
GPUS = "GPU budget"
PATHS = "paths and datasets"
KINDS = (UNKNOWN, REFUSED, INVALID, ALGORITHM, WORKFLOW, GPUS, PATHS)
"""The kinds of config problems, in the order `Problems` lists them."""


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
