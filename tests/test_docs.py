"""The docs stay true: the generated config reference is current and relative links resolve."""

from __future__ import annotations

import re
from pathlib import Path

from rfthpc.config.reference import render

ROOT = Path(__file__).resolve().parents[1]


def test_config_reference_is_current() -> None:
    assert (ROOT / "docs" / "config.md").read_text() == render(), (
        "docs/config.md is stale: run `python -m rfthpc.config.reference > docs/config.md`"
    )


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
