"""The algorithms reference (docs/algorithms.md), generated from the presets and the functions' docstrings.

`python -m rfthpc.algorithms.reference > docs/algorithms.md` regenerates it; a test keeps it current.
For each `algorithm.algorithm_type` the functions and settings its preset fills in (and the comment that
says where it comes from); for each advantage estimator, policy loss, KL estimator and entropy term
the names a config may use, what it computes (its docstring's first paragraph, which names its source)
and, where its docstring has them, the paragraphs that say how rfthpc differs from that source.
"""

from __future__ import annotations

import ast
import inspect
import re
from typing import Any

from rfthpc.algorithms import presets
from rfthpc.algorithms.registry import ADVANTAGE_FNS, ENTROPY_LOSS_FNS, KL_FNS, POLICY_LOSS_FNS, AlgorithmRegistry
from rfthpc.registry import _module_definitions

SECTIONS = (
    ("Advantage estimators", "algorithm.advantage_fn", ADVANTAGE_FNS),
    ("Policy losses", "algorithm.policy_loss_fn", POLICY_LOSS_FNS),
    ("KL estimators", "algorithm.kl_loss_fn, algorithm.kl_penalty_fn", KL_FNS),
    ("Entropy terms", "algorithm.entropy_loss_fn", ENTROPY_LOSS_FNS),
)
_DIFFERS = re.compile(r"\bdiffer|\bunlike\b", re.IGNORECASE)
"""A docstring paragraph that says how rfthpc's function differs from the one it is named after."""
_PRESET_LINE = re.compile(r'^\s{4}"([a-z0-9_]+)": ')


def _cell(text: str) -> str:
    """One Markdown table cell: a single line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _shown(value: Any) -> str:
    return "—" if value is None else f"`{value}`"


def preset_comments() -> dict[str, str]:
    """The comment above each entry of `ALGORITHM_PRESETS` in presets.py, by algorithm type."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(presets).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
            continue
        match = _PRESET_LINE.match(line)
        if match and match.group(1) in presets.ALGORITHM_PRESETS:
            comments[match.group(1)] = " ".join(pending)
        pending = []
    return comments


def _presets_table() -> list[str]:
    comments = preset_comments()
    rows = ["| `algorithm_type` | advantage | policy loss | KL loss / KL penalty | entropy | aggregation | "
            "responses per task | other defaults | note |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    main_keys = {"advantage_fn", "policy_loss_fn", "kl_loss_fn", "kl_penalty_fn", "entropy_loss_fn", "loss_agg_mode",
                 "repeat_times"}
    for name, preset in presets.ALGORITHM_PRESETS.items():
        other = "; ".join(f"`{k}: {v}`" for k, v in preset.items() if k not in main_keys)
        rows.append(f"| `{name}` | {_shown(preset['advantage_fn'])} | {_shown(preset['policy_loss_fn'])} | "
                    f"{_shown(preset['kl_loss_fn'])} / {_shown(preset['kl_penalty_fn'])} | "
                    f"{_shown(preset['entropy_loss_fn'])} | `{preset['loss_agg_mode']}` | {preset['repeat_times']} | "
                    f"{_cell(other)} | {_cell(comments.get(name, ''))} |")
    return rows


def _arguments(target: str) -> str:
    """The `*_args` a function takes (its keyword-only parameters) with their defaults; rfthpc's own plumbing
    (`loss_agg_mode`, which the config sets apart) left out."""
    node = _module_definitions(target.split(":")[0])[target.split(":")[1]]
    assert isinstance(node, ast.FunctionDef)
    shown = []
    for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
        if arg.arg == "loss_agg_mode":
            continue
        shown.append(f"`{arg.arg}`" + ("" if default is None else f" ({ast.unparse(default)})"))
    return ", ".join(shown)


def function_rows(registry: AlgorithmRegistry[Any]) -> list[str]:
    """One row per built-in function of `registry`: its names (aliases together), what it computes (a policy
    loss whose "old" log-probabilities are the policy's at the start of the step marked *proximal*), its
    arguments with their defaults, how it differs from its source."""
    names: dict[str, list[str]] = {}
    for name, target in registry._builtins.items():
        names.setdefault(target, []).append(name)
    rows = ["| names | what it computes | arguments (default) | where rfthpc differs from its source | defined in |",
            "| --- | --- | --- | --- | --- |"]
    for target, aliases in names.items():
        module, fn = target.split(":")
        paragraphs = (ast.get_docstring(_module_definitions(module)[fn]) or "").split("\n\n")
        # A first paragraph ending in a colon introduces its formula, the next paragraph.
        summary = 2 if paragraphs[0].rstrip().endswith(":") else 1
        differs = [p for p in paragraphs[summary:] if _DIFFERS.search(p)]
        proximal = "*proximal*; " if getattr(registry.needs(aliases[0]), "old_log_prob", None) == "proximal" else ""
        rows.append(f"| {', '.join(f'`{a}`' for a in aliases)} | {proximal}{_cell(' '.join(paragraphs[:summary]))} | "
                    f"{_cell(_arguments(target))} | {_cell(' '.join(differs))} | `{module}` |")
    return rows


def render() -> str:
    """The whole reference as Markdown."""
    differences = next(p for p in (presets.__doc__ or "").split("\n\n") if p.startswith("Differences"))
    out = [
        "# Algorithms",
        "",
        "Generated from `rfthpc/algorithms/` by `python -m rfthpc.algorithms.reference`; do not edit by hand.",
        "A config picks an `algorithm.algorithm_type`, whose preset fills every `algorithm.*` key left unset;",
        "any of the functions below may be named instead, or the user's own as `module:function`",
        "(docs/configuration.md). Where a name is Trinity-RFT's, veRL's or ROLL's, the function computes what",
        "theirs computes on the same inputs, except as the column \"where rfthpc differs\" says. A function's",
        "arguments are set in the config's `<key>_args` (`advantage_fn_args`, `policy_loss_fn_args`, ...); a",
        "policy loss marked *proximal* compares with the policy at the start of the trainer's step, the others",
        "with the behaviour policy whose log-probabilities the explorer stored (docs/trainer.md).",
        "",
        "## Algorithm types (`algorithm.algorithm_type`)",
        "",
        *_presets_table(),
        "",
        _cell(differences),
        "",
    ]
    for title, key, registry in SECTIONS:
        out += [f"## {title} (`{key}`)", "", *function_rows(registry), ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
