"""The config reference (docs/config.md), generated from the dataclasses' attribute docstrings.

`python -m rfthpc.config.reference > docs/config.md` regenerates it; a test keeps it current.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from typing import Any

from rfthpc.config.schema import Config
from rfthpc.config.typed import _describe


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass: the string literal right after each field."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return None if dataclasses.is_dataclass(value) else value
    return None


def _nested(tp: Any) -> type | None:
    for arg in (tp, *typing.get_args(tp)):
        if dataclasses.is_dataclass(arg):
            return arg  # type: ignore[return-value]
        for inner in typing.get_args(arg):
            if dataclasses.is_dataclass(inner):
                return inner  # type: ignore[return-value]
    return None


def _section(cls: type, prefix: str, out: list[str], seen: dict[type, str]) -> None:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    rows, children = [], []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        nested = _nested(tp)
        key = f"{prefix}{f.name}"
        if typing.get_origin(tp) is list and nested:
            key += "[]"
        if nested:
            children.append((nested, key + "."))
            rows.append(f"| `{key}` | section | | {docs.get(f.name, '')} |")
            continue
        default = _default(f)
        shown = "" if default is None else f"`{default!r}`".replace("|", "\\|")
        rows.append(f"| `{key}` | {_describe(tp).replace('|', '/')} | {shown} | {docs.get(f.name, '')} |")
    title = prefix.rstrip(".") or "top level"
    out += [f"## `{title}`", "", (inspect.getdoc(cls) or "").split("\n")[0], "",
            "| key | type | default | meaning |", "| --- | --- | --- | --- |", *rows, ""]
    for nested, child_prefix in children:
        if nested in seen:
            out += [f"## `{child_prefix.rstrip('.')}`", "", f"Same keys as `{seen[nested]}`.", ""]
        else:
            seen[nested] = child_prefix.rstrip(".")
            _section(nested, child_prefix, out, seen)


def render() -> str:
    """The whole reference as Markdown."""
    out = [
        "# Config reference",
        "",
        "Generated from the dataclasses in `rfthpc/config/` by `python -m rfthpc.config.reference`;",
        "do not edit by hand. A key is overridden on the command line as a dotted flag",
        "(`--algorithm.optimizer.lr 1e-6`, list items by index: `--buffer.explorer_input.tasksets.0.path D`;",
        "entries of free-form mappings only if the YAML has them). Unset values (no default shown) are",
        "derived; see docs/configuration.md.",
        "",
    ]
    _section(Config, "", out, {})
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
