"""How another framework's keys are read: mapped onto rfthpc's keys, ignored with a note, or refused.

Every key of Trinity-RFT, veRL or ROLL that rfthpc does not take as its own gets one of three answers:
- mapped: read as an rfthpc key (`trinity.RENAMED_KEYS`, `verl.VERL_MAP`, `roll.ROLL_MAP`); `rfthpc
  config show` lists where each mapped value came from;
- ignored: it has no meaning here (Ray, a Trinity-RFT internal, a speed switch): loading says why in
  one note on stderr;
- refused: it would change results in a way rfthpc cannot follow: an error names why and the
  alternative. A refused key whose value changes nothing (empty, off, or the other framework's
  default) is ignored instead, with a note; so a dumped config, which spells out every default, loads.

A key with none of the three answers is an unknown key (`rfthpc.config.typed`, `read_settings`).

Answer tables (`trinity.TRINITY_KEYS`, `verl.VERL_KEYS`, `roll.ROLL_KEYS`) map a key, or a pattern with
`*` (any characters, dots included), to its answer; a key's exact entry wins over patterns, which are
tried in table order. A mapping table (`Target`s) says which rfthpc key, or which argument of the
chosen algorithm function, a setting becomes; `read_settings` and `apply_reading` carry it out. Each
mapped value is recorded (`Problems.map`); an explicit rfthpc key wins over a mapped one, with a note
when they differ.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rfthpc.errors import ALGORITHM, INVALID, UNKNOWN, ConfigError, Problems

Given = Mapping[str, Any]
"""The other settings of the same framework in the config: dotted key -> value (some answers read two keys)."""


def _never(_value: Any, _given: Given) -> bool:
    return False


@dataclass(frozen=True)
class Ignored:
    """The key has no meaning in rfthpc; `why` says so in a note."""

    why: str


@dataclass(frozen=True)
class Refused:
    """The key would change results and rfthpc cannot follow it; `why` says so and names the alternative.
    A value for which `harmless(value, given)` holds changes nothing: the key is then ignored, with
    `note` (or a generic note) saying so."""

    why: str
    harmless: Callable[[Any, Given], bool] = _never
    note: str = ""


Answer = Ignored | Refused


HARMLESS = "left empty, off or at its default, where it changes nothing in rfthpc either"


def off(value: Any, _given: Given) -> bool:
    """Empty, null, false or zero."""
    return not value


def one_of(*values: Any) -> Callable[[Any, Given], bool]:
    """One of `values` (text compared without case)."""
    folded = {v.lower() if isinstance(v, str) else v for v in values}

    def check(value: Any, _given: Given) -> bool:
        v = value.lower() if isinstance(value, str) else value
        try:
            return v in folded
        except TypeError:  # an unhashable value (a list, a mapping) is none of them
            return False
    return check


def unless(switch: str) -> Callable[[Any, Given], bool]:
    """Harmless while the setting `switch` (another key of the same framework) is off."""
    return lambda _value, given: not given.get(switch)


def same_as(key: str, default: Any) -> Callable[[Any, Given], bool]:
    """Harmless when equal to the setting `key` (`default` where it is not given)."""
    return lambda value, given: value is None or value == given.get(key, default)


def nothing_enabled(value: Any, _given: Given) -> bool:
    """A section whose every `enable` / `enabled` switch is off (or that is empty)."""
    if isinstance(value, Mapping):
        return all(not v if k in ("enable", "enabled") else nothing_enabled(v, _given) for k, v in value.items())
    if isinstance(value, list):
        return all(nothing_enabled(v, _given) for v in value)
    return True


def lookup(table: Mapping[str, Answer], key: str) -> Answer | None:
    """The table's answer for `key`: its exact entry, else the first pattern it matches."""
    if key in table:
        return table[key]
    for pattern, answer in table.items():
        if "*" in pattern and fnmatch.fnmatchcase(key, pattern):
            return answer
    return None


def answer(table: Mapping[str, Answer], key: str, value: Any, given: Given) -> Answer | None:
    """`lookup`, with a refusal of a value that changes nothing turned into an Ignored (its note)."""
    found = lookup(table, key)
    if isinstance(found, Refused) and found.harmless(value, given):
        return Ignored(found.note or HARMLESS)
    return found


def close_name(name: str, names: Iterable[str]) -> str | None:
    """The one of `names` that `name` is likely a misspelling of: close, and beginning alike unless
    very close (ROLL's `pretrain` is not a misspelt `trainer`); None rather than a far-fetched guess."""
    for candidate in difflib.get_close_matches(name, list(names), n=3, cutoff=0.6):
        if candidate[:2] == name[:2] or difflib.SequenceMatcher(None, name, candidate).ratio() >= 0.85:
            return candidate
    return None


def close_key(key: str, known: Iterable[str]) -> str | None:
    """A known dotted key `key` is likely a misspelling of: one under the same parent whose last part
    is close (`close_name`), else one very close as a whole."""
    known = [k for k in known if "*" not in k]
    parent, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == parent}
    close = close_name(leaf, siblings)
    if close:
        return siblings[close]
    whole = difflib.get_close_matches(key, known, n=1, cutoff=0.9)
    return whole[0] if whole else None


NO_RAY = "rfthpc runs on Slurm and a shared filesystem, without Ray"


RUN_DIR = "rfthpc's run directory is <checkpoint_root_dir>/<project>/<name>"




CRITIC_LORA = ("rfthpc trains every weight of the critic; a LoRA adapter is trained for the policy only (model.lora): "
               "remove it")


SP_OF_ACTOR = ("every model the trainer runs splits its sequences as the actor does "
               "(trainer.ulysses_sequence_parallel_size); the split changes no number, only memory and speed")


def same_text(a: Any, b: Any) -> bool:
    return str(a).lower() == str(b).lower()


@dataclass(frozen=True)
class FnChoice:
    """A setting that chooses a function: `algorithm.<fn_key>` = translate(value, settings), where
    settings are all the settings of that framework given (some choices read two keys)."""

    fn_key: str
    translate: Callable[[Any, Mapping[str, Any]], str]


@dataclass(frozen=True)
class FnArg:
    """A setting that only some functions read: it becomes `algorithm.<fn_key>_args.<arg>` when the
    function chosen for `algorithm.<fn_key>` takes `arg`, and has no effect otherwise (as in veRL and
    ROLL, where each function reads its own settings from a shared config)."""

    fn_key: str
    arg: str


@dataclass(frozen=True)
class Translated:
    """A setting of a plain rfthpc key spelled differently: `target` = translate(value, settings); a
    None result sets nothing."""

    target: str
    translate: Callable[[Any, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class ReadWith:
    """A setting only the mappings of `keys` read; it has no effect of its own (as in its framework)."""

    keys: str


Target = str | FnChoice | FnArg | Translated | ReadWith
"""What a mapped key of another framework sets: an rfthpc dotted key (the value as given), or one of the above."""


@dataclass
class Reading:
    """What another framework's settings stand for in rfthpc."""

    targets: dict[str, tuple[Any, str]]
    """rfthpc dotted key -> (value, the key it was read from)."""
    fn_args: dict[tuple[str, str], tuple[Any, str]]
    """(fn_key, argument) -> (value, the key it was read from): set if the chosen function takes it."""


def _answer(key: str, value: Any, given: Mapping[str, Any], answers: Mapping[str, Answer],
            known: list[str], framework: str, where: str, problems: Problems) -> None:
    """Say what becomes of a key no mapping reads: ignored (a note), refused, or unknown."""
    found = answer(answers, key, value, given)
    if isinstance(found, Ignored):
        problems.ignored(where, found.why)
    elif isinstance(found, Refused):
        problems.refuse(where, framework, found.why)
    else:
        close = close_key(key, known)
        hint = f" (did you mean {close}?)" if close else ""
        problems.add(f"{where}: unknown {framework} key{hint}; docs/migration.md lists the {framework} keys rfthpc "
                     "maps, ignores or refuses", UNKNOWN)


def read_settings(flat: dict[str, Any], given: Mapping[str, Any], mapping: Mapping[str, Target],
          answers: Mapping[str, Answer], framework: str, prefix: str, problems: Problems) -> Reading:
    """What `framework`'s settings `flat` (dotted key -> value, written under `prefix` in the config)
    stand for: rfthpc settings and function arguments. `given`: every setting of it in force (a
    mapping may read two). Keys `mapping` does not read are answered from `answers`."""
    out = Reading({}, {})
    known = [*mapping, *answers]
    for key, value in flat.items():
        where = prefix + key
        if key.rsplit(".", 1)[-1] == "_target_" or value == {}:
            continue  # Hydra's class to instantiate (in dumped configs), or an empty section: nothing to set
        target = mapping.get(key)
        if target is None:
            _answer(key, value, given, answers, known, framework, where, problems)
            continue
        if value is None or isinstance(target, ReadWith):
            continue  # null is "unset"
        if isinstance(target, FnArg):
            out.fn_args.setdefault((target.fn_key, target.arg), (value, where))
            continue
        try:
            if isinstance(target, FnChoice):
                target, value = f"algorithm.{target.fn_key}", target.translate(value, given)
            elif isinstance(target, Translated):
                target, value = target.target, target.translate(value, given)
        except ConfigError as e:
            problems.add(f"{where}: {e}", ALGORITHM if isinstance(target, FnChoice) else INVALID)
            continue
        if value is None:
            continue
        if target in out.targets:
            first, first_key = out.targets[target]
            if first != value:
                problems.notes.append(f"{where}: {value!r} is not used: {first_key} ({first!r}) sets {target} too")
            continue
        out.targets[target] = (value, where)
    return out


def set_mapped(raw: dict[str, Any], target: str, value: Any, where: str, framework: str,
                problems: Problems) -> None:
    """Set the dotted `target` of the raw config to `value`, read from `where`, unless the config sets
    it itself (a null does not): then a note if the two differ."""
    *parents, leaf = target.split(".")
    node = raw
    for p in parents:
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        if not isinstance(child, dict):
            return  # typed conversion reports the section that is not a mapping
        node = child
    if node.get(leaf) is None:
        node[leaf] = value
        problems.map(target, value, where, framework)
    elif node[leaf] != value:
        problems.notes.append(f"{where}: {value!r} is not used: the config sets {target}: {node[leaf]!r}")


def chosen_function(fn_key: str, name: str | None, algorithm_type: str | None) -> str | None:
    """The function `algorithm.<fn_key>` will name: `name` if set, else the preset's."""
    if name:
        return name
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS

    return (ALGORITHM_PRESETS.get(algorithm_type or "ppo") or {}).get(fn_key)


def takes_argument(fn_key: str, name: str | None, arg: str) -> bool:
    """Whether the built-in function `name` of `algorithm.<fn_key>` takes the argument `arg` (read from
    its source). A user's function, or a name validation will report as unknown, takes everything:
    validation then checks the argument against the function itself."""
    if name is None:
        return False
    from rfthpc import algorithms as algos

    registry = algos.POLICY_LOSS_FNS if fn_key == "policy_loss_fn" else algos.ADVANTAGE_FNS
    if name not in registry.names():
        return True
    try:
        registry.check(name, {arg: None})
    except ConfigError:
        return False
    return True


def apply_reading(raw: dict[str, Any], reading: Reading, problems: Problems, framework: str,
           inherited: Mapping[str, Any] | None = None) -> None:
    """Set what `reading` stands for in the raw config (explicit rfthpc keys win); a function argument
    only where the function `raw` (or `inherited`, the run's raw config for a stage) chooses takes it."""
    for target, (value, where) in reading.targets.items():
        set_mapped(raw, target, value, where, framework, problems)
    alg = raw.get("algorithm") if isinstance(raw.get("algorithm"), dict) else {}
    base = (inherited or {}).get("algorithm") or {}
    algorithm_type = alg.get("algorithm_type") or base.get("algorithm_type")
    for (fn_key, arg), (value, where) in reading.fn_args.items():
        if takes_argument(fn_key, chosen_function(fn_key, alg.get(fn_key) or base.get(fn_key), algorithm_type), arg):
            set_mapped(raw, f"algorithm.{fn_key}_args.{arg}", value, where, framework, problems)


def lora_default(reading: Reading, key: str, value: Any, framework_default: str) -> None:
    """Where another framework trains an adapter but leaves `model.lora.<key>` to its own default,
    which differs from rfthpc's, read that default."""
    if "model.lora.lora_rank" in reading.targets and f"model.lora.{key}" not in reading.targets:
        reading.targets[f"model.lora.{key}"] = (value, framework_default)
