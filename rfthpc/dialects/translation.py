"""What every import of a foreign config (`rfthpc config import`) shares: an account of each foreign
key, and the rfthpc YAML written with where each value came from.

An importer reads the foreign config through a `Translation`. Each foreign key ends in one of:
- mapped: `set` writes an rfthpc value and names the key(s) it came from (a comment beside it);
- the same: rfthpc does what the key asks without a setting (`same`; listed in the header);
- noted: accepted, but read differently or without effect in rfthpc (`note`; header and stderr);
- refused: it changes results and rfthpc cannot do it (`refuse`): an error naming the key, why and
  the alternative; `--ignore KEY` turns it into a note, for a user who accepts the difference.
A key the importer never looked at is unknown: also refused. Every problem is reported in one error.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rfthpc.errors import ConfigError

ROLL_DEFAULT = "ROLL default"
_MISSPELT = 0.85
"""Similarity (difflib's ratio) above which an unknown key reads as a misspelling of a known one (max_stepz)."""


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value for every leaf (a list, a scalar or an empty mapping) of `data`."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted))
        else:
            out[dotted] = value
    return out


@dataclass
class Imported:
    """An imported config: its YAML text and the taskset files it names."""

    text: str
    config: dict[str, Any]
    tasksets: dict[Path, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Translation:
    """The foreign config being translated, and what became of each of its keys."""

    data: dict[str, Any]
    """The foreign config (composed, interpolations resolved)."""
    origin: str
    """How the header and messages name the foreign format (e.g. "ROLL")."""
    leaves: dict[str, Any] = field(init=False)
    config: dict[str, Any] = field(default_factory=dict)
    """The rfthpc config being written."""
    sources: dict[str, str] = field(default_factory=dict)
    """rfthpc dotted key -> where its value came from."""
    notes: list[str] = field(default_factory=list)
    same: list[str] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    looked: set[str] = field(default_factory=set)
    """Top-level keys the importer knows (it asked for them, given or not)."""
    leading: str | None = None
    """The refused key listed first: the one that rules the run out whatever else is changed."""

    def __post_init__(self) -> None:
        self.leaves = flatten(self.data)

    def has(self, key: str) -> bool:
        """Whether the foreign config gives `key` (a leaf, or a mapping with leaves)."""
        self.looked.add(key.split(".", 1)[0])
        return key in self.leaves or any(k.startswith(key + ".") for k in self.leaves)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key` (a leaf or a whole mapping), or `default`; the key counts as handled."""
        if not self.has(key):
            return default
        self.used |= {k for k in self.leaves if k == key or k.startswith(key + ".")}
        node: Any = self.data
        for part in key.split("."):
            node = node[part]
        return node

    def whole(self, key: str, default: int, least: int = 1) -> int:
        """`key` as a whole number >= `least` (or `default`); another value is refused, and `default` stands
        in for it so the translation goes on to report every problem."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            self.refuse(key, f"{scalar(value)}: expected a whole number >= {least}")
            return default
        return value

    def keys(self, key: str) -> list[str]:
        """The names under the mapping `key` (e.g. the environments of `custom_envs`)."""
        node = self.data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        self.looked.add(key.split(".", 1)[0])
        return list(node) if isinstance(node, dict) else []

    def set(self, target: str, value: Any, source: str) -> None:
        """Write rfthpc's `target` (dotted; `[i]` indexes a list) = `value`, which came from `source`."""
        node: Any = self.config
        parts = target.split(".")
        for part in parts[:-1]:
            name, index = _indexed(part)
            child = node.setdefault(name, [] if index is not None else {})
            if index is not None:
                while len(child) <= index:
                    child.append({})
                child = child[index]
            node = child
        node[parts[-1]] = value
        if source:
            self.sources[target] = source

    def note(self, keys: str | Iterable[str], text: str) -> None:
        """Accept `keys` (those given) with a note on how rfthpc reads them."""
        given = [k for k in _listed(keys) if self.has(k)]
        for k in given:
            self.get(k)
        if given:
            self.notes.append(f"{', '.join(given)}: {text}")

    def refuse(self, key: str, text: str) -> None:
        """`key` changes results in a way rfthpc cannot reproduce: `text` says why and what to do."""
        self.get(key)
        self.problems[key] = text

    def same_if(self, key: str, neutral: Any, refusal: str) -> None:
        """`key` at its `neutral` value (or absent) is what rfthpc does anyway; any other value is refused."""
        if not self.has(key):
            return
        value = self.get(key)
        if value == neutral or (neutral is None and value in (None, {}, [])):
            self.same.append(f"{key}: {scalar(value)}")
        else:
            self.refuse(key, f"{scalar(value)}: {refusal}")

    def sweep(self, helpers_ok: set[str], fields: set[str], schema: str, drops_unknown: bool = False) -> None:
        """Refuse every leaf nobody handled. `fields`: the foreign config's top-level settings (its `schema`,
        e.g. ROLL's RLVRConfig); a top-level key outside them is a helper key if it is in `helpers_ok`
        (a value that only feeds interpolations or anchors), else an unknown key: refused, or noted when
        the foreign framework itself drops unknown keys (`drops_unknown`: ROLL's dataclasses do), since
        the run is then the same without it, whether the key came from an included file or not. A near
        miss of a field's name is refused all the same: a misspelt setting, which both would drop."""
        candidates = sorted(fields | self.looked)
        helpers: set[str] = set()
        unknown: dict[str, list[str]] = {}
        for leaf in self.leaves:
            if leaf in self.used:
                continue
            top = leaf.split(".", 1)[0]
            if top not in self.looked and top not in fields and top in helpers_ok:
                helpers.add(top)
                continue
            if top not in self.looked and top not in fields:
                unknown[top] = difflib.get_close_matches(top, candidates, n=1)
                continue
            self.problems[leaf] = (f"{scalar(self.leaves[leaf])}: a {self.origin} setting the importer does not "
                                   "translate; remove it, or set the matching rfthpc key in the imported config")
        self.helpers = sorted(helpers)
        for top, close in unknown.items():
            misspelt = difflib.get_close_matches(top, close, n=1, cutoff=_MISSPELT)
            if drops_unknown and not misspelt:
                self.notes.append(f"{top}: not a field of {self.origin}'s {schema}: {self.origin} ignores it, and so "
                                  "does the import")
            else:
                hint = f" (did you mean {close[0]}?)" if close else ""
                self.problems[top] = (f"not a field of {self.origin}'s {schema}, so {self.origin} ignores it too: fix "
                                      f"its name{hint}, or remove it")

    def apply_ignores(self, ignores: Iterable[str]) -> None:
        """Turn the refusals the user named (`--ignore KEY`: the key, or a section above it) into notes."""
        for pattern in ignores:
            hit = [k for k in self.problems if k == pattern or k.startswith(pattern + ".") or
                   fnmatch.fnmatchcase(k, pattern)]
            if not hit:
                self.notes.append(f"--ignore {pattern}: no refused key matches it")
            for key in hit:
                self.notes.append(f"{key}: ignored at your request (--ignore), so the run differs from "
                                  f"{self.origin}'s: {self.problems.pop(key)}")

    def raise_if_refused(self, source: str) -> None:
        if not self.problems:
            return
        ordered = sorted(self.problems.items(), key=lambda item: (item[0] != self.leading, item[0]))
        lines = "\n".join(f"  - {k}: {v}" for k, v in ordered)
        raise ConfigError(
            f"{source}: {len(self.problems)} {self.origin} setting(s) cannot be imported:\n{lines}\n"
            f"Change them in the {self.origin} config, or pass --ignore KEY for each to import without them "
            f"(the run then differs from {self.origin}'s)"
        )


def _indexed(part: str) -> tuple[str, int | None]:
    if part.endswith("]") and "[" in part:
        name, index = part[:-1].split("[", 1)
        return name, int(index)
    return part, None


def _listed(keys: str | Iterable[str]) -> list[str]:
    return [keys] if isinstance(keys, str) else list(keys)


def render_yaml(config: dict[str, Any], sources: dict[str, str], header: list[str]) -> str:
    """The config as YAML with `# <source>` beside each value whose source is known, after `header`
    (comment lines). Strings are written JSON-quoted, with `${` escaped, so they read back as written."""
    lines = [f"# {h}" if h else "#" for h in header]
    _emit(config, "", 0, sources, lines)
    return "\n".join(lines) + "\n"


def _emit(node: dict[str, Any], path: str, indent: int, sources: dict[str, str], lines: list[str]) -> None:
    pad = " " * indent
    for key, value in node.items():
        dotted = f"{path}.{key}" if path else key
        comment = f"  # {sources[dotted]}" if dotted in sources else ""
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{key}:{comment}")
            _emit(value, dotted, indent + 2, sources, lines)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{pad}{key}:{comment}")
            for i, item in enumerate(value):
                sub: list[str] = []
                _emit(item, f"{dotted}[{i}]", indent + 4, sources, sub)
                sub[0] = f"{pad}  - " + sub[0].lstrip()
                lines.extend(sub)
        else:
            lines.append(f"{pad}{key}: {scalar(value)}{comment}")


def scalar(value: Any) -> str:
    """One YAML flow value (lists and mappings in flow style)."""
    if isinstance(value, str):
        return json.dumps(value.replace("${", "\\${"), ensure_ascii=False)
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        return repr(value) if math.isfinite(value) else ".inf" if value > 0 else "-.inf"
    if isinstance(value, list):
        return "[" + ", ".join(scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{scalar(str(k))}: {scalar(v)}" for k, v in value.items()) + "}"
    return str(value)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write `rows` as JSON lines, published whole (temporary name, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    tmp.replace(path)


SECTIONS = ("project", "name", "mode", "checkpoint_root_dir", "continue_from_checkpoint", "algorithm", "model",
            "cluster", "buffer", "explorer", "synchronizer", "trainer", "monitor", "stages", "slurm", "filesystem")
"""rfthpc's top-level config keys in the order of its schema (`rfthpc.config.schema.Config`, whose fields a
test compares with these), the order `rfthpc config show` prints and an imported config is written in."""


def in_schema_order(config: dict[str, Any]) -> dict[str, Any]:
    """The config's sections in the order of rfthpc's schema (as `config show` prints them)."""
    return {k: config[k] for k in sorted(config, key=lambda k: SECTIONS.index(k) if k in SECTIONS else len(SECTIONS))}


def shown(path: Path) -> str:
    """`path` as a header names it: relative to the working directory where it lies below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
