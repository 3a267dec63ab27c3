"""The docs stay true: the generated config reference is current and relative links resolve."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from rfthpc.algorithms import reference as algorithms_reference
from rfthpc.config.reference import render

ROOT = Path(__file__).resolve().parents[1]


def test_config_reference_is_current() -> None:
    assert (ROOT / "docs" / "config.md").read_text() == render(), (
        "docs/config.md is stale: run `python -m rfthpc.config.reference > docs/config.md`"
    )


def test_algorithms_reference_is_current() -> None:
    assert (ROOT / "docs" / "algorithms.md").read_text() == algorithms_reference.render(), (
        "docs/algorithms.md is stale: run `python -m rfthpc.algorithms.reference > docs/algorithms.md`"
    )


def test_every_algorithm_type_and_function_is_described() -> None:
    text = algorithms_reference.render()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    # every preset and every built-in function has a row, and every function row says what it computes
    assert len(rows) >= 30 and all(line.split(" | ")[1].strip() for line in rows), rows
    assert "| `jsd` | `jsd` | `ppo` |" in text


def test_every_config_field_has_a_docstring() -> None:
    missing = [line for line in render().splitlines() if line.startswith("| `") and line.rstrip().endswith("|  |")]
    assert not missing, missing


def test_relative_links_resolve() -> None:
    broken = []
    for md in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", md.read_text()):
            if "://" in target:
                continue
            if not (md.parent / target).exists():
                broken.append(f"{md.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def _sections(text: str, marker: str) -> dict[str, str]:
    """The parts of `text` under each heading that starts with `marker` (e.g. "## "), by title."""
    parts = re.split(rf"^{marker}(.+)$", text, flags=re.MULTILINE)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def _keys(text: str) -> set[str]:
    """The keys a doc names in backticks, `a.{b,c}` expanded, a value (`key: value`) left off."""
    keys = set()
    for span in re.findall(r"`([^`]+)`", text):
        key = span.split(": ", 1)[0]
        groups = re.findall(r"\{([^}]*)\}", key)
        for choice in itertools.product(*(g.split(",") for g in groups)):
            expanded = key
            for part in choice:
                expanded = re.sub(r"\{[^}]*\}", part, expanded, count=1)
            keys.add(expanded)
    return keys


def test_migration_gives_every_foreign_key_its_answer() -> None:
    """docs/migration.md lists each Trinity-RFT, veRL and ROLL key rfthpc maps, ignores or refuses, in
    its framework's table of that answer (the code's tables are the truth; the doc must follow)."""
    from rfthpc.dialects import mapping, roll, trinity, verl

    sections = _sections((ROOT / "docs" / "migration.md").read_text(), "## ")
    missing = []
    for title, mapped, answers in (
        ("Trinity-RFT keys", trinity.RENAMED_KEYS, trinity.TRINITY_KEYS),
        ("veRL settings", verl.VERL_MAP, verl.VERL_KEYS),
        ("ROLL settings", [*roll.ROLL_MAP, "async_generation_ratio"], roll.ROLL_KEYS),
    ):
        tables = {name: _keys(body) for name, body in _sections(sections[title], "### ").items()}
        expected = [("Mapped", key) for key in mapped] + [
            ("Ignored (a note)" if isinstance(answer, mapping.Ignored) else "Refused (an error)", key)
            for key, answer in answers.items()]
        missing += [f"{title} / {table}: {key}" for table, key in expected if key not in tables[table]]
    assert not missing, "\n".join(missing)
