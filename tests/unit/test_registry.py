"""Registries: built-ins declared as name → "module:function", checked from source without importing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rfthpc import algorithms
from rfthpc.envs.registry import ENVS
from rfthpc.errors import ConfigError
from rfthpc.registry import Registry, accepted_keywords
from rfthpc.rewards.registry import REWARDS
from rfthpc.workflows.registry import WORKFLOWS

SHIPPED = [algorithms.ADVANTAGE_FNS, algorithms.POLICY_LOSS_FNS, algorithms.KL_FNS, algorithms.ENTROPY_LOSS_FNS,
           WORKFLOWS, REWARDS, ENVS]


@pytest.mark.parametrize("registry", SHIPPED, ids=lambda r: r.kind)
def test_every_builtin_imports_and_its_source_signature_is_the_real_one(registry: Registry) -> None:
    for name in registry.names():
        accepted = accepted_keywords(registry.get(name))
        Registry.check(registry, name, dict.fromkeys(accepted or (), 0))  # the names only, from the source
        registry.check(name, {})  # the defaults pass the function's own value check, where it declares one
        if accepted is not None:
            listed = ", ".join(sorted(accepted)) or "(none)"
            expected = rf"'no_such_argument' not accepted by .*; accepted: {re.escape(listed)}\.$"
            with pytest.raises(ConfigError, match=expected):
                registry.check(name, {"no_such_argument": 0})


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    """A registry whose built-ins live in a module that fails when imported (as if torch were missing)."""
    (tmp_path / "heavy_parts.py").write_text(
        'raise RuntimeError("heavy_parts was imported")\n\n\n'
        "def scale(x, *, factor=1.0, **extra):\n    return x * factor\n\n\n"
        "def shift(x, *, by=0.0):\n    return x + by\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return Registry("part", "algorithm.part", {"scale": "heavy_parts:scale", "shift": "heavy_parts:shift",
                                               "move": "heavy_parts:shift", "broken": "heavy_parts:missing"})


def test_builtins_are_checked_without_importing_their_module(parts: Registry) -> None:
    parts.check("shift", {"by": 1.0})
    parts.check("move")
    parts.check("scale", {"anything": 1})  # **extra takes every name
    with pytest.raises(ConfigError, match=r"^algorithm\.part_args: 'factor' not accepted by part 'shift'; "
                                          r"accepted: by\.$"):
        parts.check("shift", {"factor": 2})
    assert "heavy_parts" not in sys.modules
    with pytest.raises(RuntimeError, match="heavy_parts was imported"):
        parts.get("shift")


def test_unknown_name_lists_the_builtins_and_user_functions(parts: Registry) -> None:
    assert parts.names() == ["broken", "move", "scale", "shift"]
    with pytest.raises(ConfigError, match=r"^algorithm\.part: unknown part 'shfit'; known: broken, move, scale, "
                                          r"shift \(or your own function as 'module:function'\)\.$"):
        parts.check("shfit")


def test_user_functions_are_imported_and_checked(parts: Registry, tmp_path: Path) -> None:
    user = tmp_path / "mine.py"
    user.write_text("def halve(x, *, floor=False):\n    return x // 2 if floor else x / 2\n")
    parts.check(f"{user}:halve", {"floor": True})
    with pytest.raises(ConfigError, match="'ceil' not accepted by part .*; accepted: floor"):
        parts.check(f"{user}:halve", {"ceil": True})
    with pytest.raises(ConfigError, match="cannot import module 'not_installed_xyz'"):
        parts.check("not_installed_xyz:fn")


def test_a_table_entry_without_its_function_is_a_bug_named_by_target(parts: Registry) -> None:
    with pytest.raises(LookupError, match=r"no top-level `def missing` or `class missing` "
                                          r"\(named by the built-in 'heavy_parts:missing'"):
        parts.check("broken")


def test_builtin_classes_are_checked_from_their_init_without_importing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "heavy_games.py").write_text(
        'raise RuntimeError("heavy_games was imported")\n\n\n'
        "class Maze:\n    def __init__(self, *, size=4, seed=None):\n        self.size = size\n\n"
        "    def reset(self, *, depth=0):\n        return depth\n\n\n"
        "class Open:\n    def __init__(self, **anything):\n        pass\n\n\n"
        "class Inherits(Maze):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    games = Registry("game", "workflow_args.game", {"maze": "heavy_games:Maze", "open": "heavy_games:Open",
                                                    "inherits": "heavy_games:Inherits"},
                     user_code="your own class as 'module:Class'")
    games.check("maze", {"size": 8, "seed": 1})
    games.check("open", {"whatever": 1})
    # Only __init__'s parameters count, not those of the class's other methods.
    with pytest.raises(ConfigError, match=r"^workflow_args\.game_args: 'depth' not accepted by game 'maze'; "
                                          r"accepted: seed, size\.$"):
        games.check("maze", {"depth": 2})
    with pytest.raises(LookupError, match="class 'Inherits' of module 'heavy_games' defines no `__init__`"):
        games.check("inherits")
    with pytest.raises(ConfigError, match=r"\(or your own class as 'module:Class'\)\.$"):
        games.check("maez")
    assert "heavy_games" not in sys.modules
