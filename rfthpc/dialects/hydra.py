"""Compose a Hydra config as Hydra would, without Hydra: the `defaults:` includes, command-line
overrides, then OmegaConf's interpolations. Used to read ROLL and veRL configs for import.

The defaults list (Hydra 1.1 and later):
- `- path/name` includes `path/name.yaml` relative to the including file (`/path/name`: relative to
  the first file's directory); `- group: option` includes `group/option.yaml` (null: nothing);
- `@_here_` merges the included file where the including one sits, `@_global_` at the top, `@pkg`
  under `pkg` (relative to the including file's place); without a package a file lands under its
  directory path (`db/mysql` under `db`), as Hydra's default package;
- `_self_` is where the file's own keys merge; without it they merge last, overriding what the file
  includes (Hydra 1.1's order). Later entries override earlier ones; lists are replaced, not joined.

Overrides are Hydra's: `key=value` (the key must exist), `+key=value` (it must not), `++key=value`
(either), `~key` (delete); values are YAML (`[1,2]`, `1e-6`, `null`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rfthpc.errors import ConfigError

_SELF = "_self_"
_INTERPOLATION = re.compile(r"\$\{([^${}]*)\}")
_PACKAGE_HEADER = re.compile(r"^#\s*@package\s+(\S+)\s*$")


@dataclass
class Composed:
    """A composed Hydra config and what the composition saw."""

    data: dict[str, Any]
    """The merged config, interpolations resolved."""
    files: list[Path] = field(default_factory=list)
    """Every file read, the first one first."""
    referenced: set[str] = field(default_factory=set)
    """Top-level keys some interpolation reads (`${max_steps}`, `${custom_env.FrozenLake}`)."""
    anchored: set[str] = field(default_factory=set)
    """Top-level keys whose value carries a YAML anchor (`base: &base {...}`), in any file."""
    hydra: dict[str, Any] = field(default_factory=dict)
    """The `hydra:` section (Hydra's own run settings), removed from `data`."""
    notes: list[str] = field(default_factory=list)
    """Overrides read otherwise than Hydra would read them, and how."""


def compose(path: Path | str, overrides: list[str] | tuple[str, ...] = ()) -> Composed:
    """Compose the config at `path` with its includes and `overrides`; ConfigError on any problem."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist" if not path.is_dir()
                          else f"config file {path} is a directory; give the YAML file in it")
    out = Composed(data={})
    parts = _load(path.resolve(), "", path.resolve().parent, [], out)
    try:
        merged = OmegaConf.merge(*parts) if parts else OmegaConf.create({})
        for override in overrides:
            _override(merged, override, out.notes)
        raw = OmegaConf.to_container(merged, resolve=False)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{path}: {str(e).splitlines()[0]}") from None
    assert isinstance(raw, dict)
    out.referenced = _referenced(raw)
    try:
        data = OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ConfigError(f"{path}: {key + ': ' if key else ''}cannot resolve an interpolation: "
                          f"{str(e).splitlines()[0]}") from None
    assert isinstance(data, dict)
    out.hydra = data.pop("hydra", None) or {}
    out.data = data
    return out


def _load(path: Path, package: str, root: Path, stack: list[Path], out: Composed) -> list[DictConfig]:
    """The parts `path` contributes, in merge order, each placed at its package."""
    if path in stack:
        chain = " -> ".join(str(p) for p in [*stack, path])
        raise ConfigError(f"{stack[0]}: the defaults lists include each other in a cycle: {chain}")
    try:
        text = path.read_text(encoding="utf-8")
        cfg = OmegaConf.create(text)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read: {e}") from None
    except (yaml.YAMLError, OmegaConfBaseException) as e:
        raise ConfigError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{path}: the top level must be a mapping, got a list")
    out.files.append(path)
    out.anchored |= _anchored_keys(text)
    own = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(own, dict)
    defaults = own.pop("defaults", [])
    if not isinstance(defaults, list):
        raise ConfigError(f"{path}: defaults must be a list, got {defaults!r}")
    parts: list[DictConfig] = []
    placed_self = False
    for entry in defaults:
        if entry == _SELF:
            parts.append(_place(own, package))
            placed_self = True
            continue
        for target, target_package, optional in _entries(entry, path, root, package):
            if not target.is_file():
                if optional:
                    continue
                raise ConfigError(f"{path}: defaults entry {entry!r}: {target} does not exist")
            parts += _load(target, _package_of(target, target_package), root, [*stack, path], out)
    if not placed_self:
        parts.append(_place(own, package))
    return parts


def _package_of(target: Path, package: str | tuple[str]) -> str:
    """The package of an included file: the defaults entry's, else its `# @package` header's."""
    if isinstance(package, str):
        return package
    header = _package_header(target.read_text(encoding="utf-8"))
    if header is None:
        return package[0]
    return "" if header == "_global_" else header


def _entries(entry: Any, path: Path, root: Path, package: str) -> list[tuple[Path, str | tuple[str], bool]]:
    """The files one defaults entry names: (file, package, optional). A package given as a 1-tuple is
    the default, which the file's `# @package` header may replace."""
    where = f"{path}: defaults entry {entry!r}"
    if isinstance(entry, str):
        optional = entry.startswith("optional ")
        name = entry.removeprefix("optional ").strip()
        if name.startswith("override "):
            raise ConfigError(f"{where}: `override` selects another option of one of Hydra's own config groups; "
                              "include the file you mean directly")
        name, _, pkg = name.partition("@")
        group = name.rsplit("/", 1)[0] if "/" in name.strip("/") else ""
        return [(_file(name, path, root), _package(pkg, group, package, where), optional)]
    if isinstance(entry, dict) and len(entry) == 1:
        (key, option), = entry.items()
        optional = str(key).startswith("optional ")
        key = str(key).removeprefix("optional ").strip()
        if key.startswith("override "):
            raise ConfigError(f"{where}: `override` selects another option of one of Hydra's own config groups; "
                              "include the file you mean directly")
        group, _, pkg = key.partition("@")
        options = [] if option is None else option if isinstance(option, list) else [option]
        return [(_file(f"{group}/{o}", path, root), _package(pkg, group, package, where), optional)
                for o in options]
    raise ConfigError(f"{where}: expected `path/name`, `group: option` or `_self_`")


def _file(name: str, path: Path, root: Path) -> Path:
    base = root if name.startswith("/") else path.parent
    target = base / name.lstrip("/")
    return (target if target.suffix in (".yaml", ".yml") else target.with_name(target.name + ".yaml")).resolve()


def _package(given: str, group: str, package: str, where: str) -> str | tuple[str]:
    """Where an included file's keys go: a dotted path from the top ("" is the top)."""
    if given == "_here_":
        return package
    if given == "_global_" or given.startswith("_global_."):
        return given.removeprefix("_global_").lstrip(".")
    if given:
        return f"{package}.{given}" if package else given
    if ".." in group.split("/"):
        raise ConfigError(f"{where}: Hydra would place this file under its directory path, which leaves the "
                          "config tree; give the place: @_here_ (where the including file sits), @_global_ "
                          "or @some.key")
    default = ".".join(p for p in group.strip("/").split("/") if p)
    return (f"{package}.{default}".strip(".") if default else package,)


def _place(data: dict[str, Any], package: str) -> DictConfig:
    for key in reversed([p for p in package.split(".") if p]):
        data = {key: data}
    return OmegaConf.create(data)


def _package_header(text: str) -> str | None:
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _PACKAGE_HEADER.match(line.strip())
        if match:
            return match.group(1)
        if not line.lstrip().startswith("#"):
            return None
    return None


def _anchored_keys(text: str) -> set[str]:
    """Top-level keys whose value carries a YAML anchor (`base: &base {...}`)."""
    keys: set[str] = set()
    depth, want_key, key = 0, True, None
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                if depth == 1 and not want_key and event.anchor and key is not None:
                    keys.add(key)
                depth += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                want_key = True
            elif depth == 1 and isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
                if want_key:
                    key, want_key = getattr(event, "value", None), False
                else:
                    if getattr(event, "anchor", None) and key is not None:
                        keys.add(key)
                    want_key = True
    except yaml.YAMLError:
        pass
    return keys


def _referenced(raw: Any) -> set[str]:
    """Top-level keys read by the interpolations in `raw` (resolvers such as `${oc.env:X}` read none)."""
    names: set[str] = set()
    stack = [raw]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            for body in _INTERPOLATION.findall(node):
                body = body.strip()
                if body and ":" not in body and not body.startswith("."):
                    names.add(re.split(r"[.\[]", body, maxsplit=1)[0])
    return names


def _override(cfg: DictConfig, override: str, notes: list[str]) -> None:
    """Apply one Hydra command-line override to `cfg` (in place). `+key=value` for a key the config has
    is read as `key=value`, with a note: Hydra refuses it, but a launch script written before the
    framework's config gained the key means just that."""
    if override.startswith("~"):
        key = override[1:].split("=", 1)[0]
        if not _exists(cfg, key):
            raise ConfigError(f"override {override!r}: {key} is not in the config")
        parent, _, leaf = key.rpartition(".")
        del (OmegaConf.select(cfg, parent) if parent else cfg)[leaf]
        return
    if "=" not in override:
        raise ConfigError(f"override {override!r}: expected key=value, +key=value, ++key=value or ~key")
    key, value = override.split("=", 1)
    force, add = key.startswith("++"), key.startswith("+") and not key.startswith("++")
    key = key.lstrip("+")
    exists = _exists(cfg, key)
    if exists and add:
        notes.append(f"{override}: {key} is in the config already, so Hydra would refuse the +; read as "
                     f"{key}={value}")
    if not exists and not (add or force) and not _in_free_mapping(cfg, key):
        raise ConfigError(f"override {override!r}: {key} is not in the config; to add it, write +{key}={value}")
    OmegaConf.update(cfg, key, _value(value), merge=False, force_add=True)


def _in_free_mapping(cfg: DictConfig, key: str) -> bool:
    """Whether `key` goes into a mapping the config leaves empty for its user to fill (veRL's
    `engine_kwargs.vllm: {}`), which takes new keys without a `+` in the scripts written for it."""
    parent = key.rpartition(".")[0]
    node = OmegaConf.select(cfg, parent, default=None) if parent else None
    return isinstance(node, DictConfig) and len(node) == 0


def _exists(cfg: DictConfig, key: str) -> bool:
    """Whether the dotted `key` is in `cfg`, a mandatory value (`???`, which the command line must
    give) included."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    if isinstance(node, ListConfig):
        return leaf.isdigit() and int(leaf) < len(node)
    return isinstance(node, DictConfig) and leaf in node.keys()  # noqa: SIM118 — `in node` skips `???` values


def _value(text: str) -> Any:
    """An override's value, parsed as OmegaConf parses YAML (`1e-6` is a float); text if it is not YAML."""
    try:
        parsed = OmegaConf.to_container(OmegaConf.create(f"v: {text}"), resolve=False)
    except (yaml.YAMLError, OmegaConfBaseException):
        return text
    return parsed["v"] if isinstance(parsed, dict) and set(parsed) == {"v"} else text
