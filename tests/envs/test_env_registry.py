"""The environment registry: built-ins by name, the user's `module:Class`, arguments checked and named."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rfthpc.envs.calculator import Calculator
from rfthpc.envs.frozen_lake import FrozenLake
from rfthpc.envs.registry import ENVS, check_env, make_env
from rfthpc.envs.sokoban import Sokoban
from rfthpc.envs.trinity_frozen_lake import TrinityFrozenLake
from rfthpc.errors import ConfigError
from rfthpc.registry import accepted_keywords, source_keywords

ROOT = Path(__file__).resolve().parents[2]
USER_ENV = '''
class Counter:
    """Counts to `target`: each reply "+" adds one."""

    def __init__(self, *, target, start=0):
        self.target, self.start = target, start

    def reset(self, seed=None, options=None):
        self.n = self.start + (seed or 0)
        return f"at {self.n}", {}

    def step(self, action):
        if action != "+":
            return f"at {self.n}; reply +", 0.0, False, False, {"invalid_action": True}
        self.n += 1
        done = self.n >= self.target
        return f"at {self.n}", float(done), done, False, {"success": True} if done else {}

    def close(self):
        pass


class NoStep:
    def __init__(self, *, size=1):
        pass

    def reset(self, seed=None, options=None):
        return "", {}

    def close(self):
        pass
'''


def test_builtins_by_name() -> None:
    assert ENVS.names() == ["calculator", "frozen_lake", "sokoban", "trinity_frozen_lake"]
    assert isinstance(make_env("frozen_lake", {"size": 5, "is_slippery": True}), FrozenLake)
    assert isinstance(make_env("trinity_frozen_lake", {"size": 3, "p": 0.7}), TrinityFrozenLake)
    assert isinstance(make_env("sokoban"), Sokoban)
    env = make_env("calculator", {"question": "1+1?", "answer": "2"})
    assert isinstance(env, Calculator)
    env.reset()
    assert env.step("#### 2")[1:3] == (1.0, True)


@pytest.mark.parametrize("name", ["frozen_lake", "sokoban", "calculator", "trinity_frozen_lake"])
def test_the_source_read_signature_is_the_real_one(name: str) -> None:
    target = {"frozen_lake": "rfthpc.envs.frozen_lake:FrozenLake", "sokoban": "rfthpc.envs.sokoban:Sokoban",
              "calculator": "rfthpc.envs.calculator:Calculator",
              "trinity_frozen_lake": "rfthpc.envs.trinity_frozen_lake:TrinityFrozenLake"}[name]
    assert source_keywords(target) == accepted_keywords(ENVS.get(name))
    assert check_env(name, dict.fromkeys(accepted_keywords(ENVS.get(name)) or (), 0)) == []


def test_a_users_class_from_a_file_with_taskset_and_row_arguments(tmp_path: Path) -> None:
    path = tmp_path / "my_envs.py"
    path.write_text(USER_ENV)
    name = f"{path}:Counter"
    assert check_env(name, {"start": 1}) == []
    taskset_args, row_args = {"target": 9, "start": 1}, {"target": 3}
    env = make_env(name, {**taskset_args, **row_args})  # as the workflow merges them: the row's win
    assert env.reset(seed=1) == ("at 2", {})
    assert env.step("-") == ("at 2; reply +", 0.0, False, False, {"invalid_action": True})
    assert env.step("+") == ("at 3", 1.0, True, False, {"success": True})


def test_a_users_class_from_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_pkg_envs.py").write_text(USER_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = make_env("my_pkg_envs:Counter", {"target": 1})
    assert env.reset() == ("at 0", {})
    assert check_env("my_pkg_envs:Counter", {"goal": 1}) == [
        "workflow_args.env_args: 'goal' not accepted by environment 'my_pkg_envs:Counter'; accepted: start, target."
    ]


def test_a_missing_argument_is_named_when_the_environment_is_made(tmp_path: Path) -> None:
    path = tmp_path / "my_envs.py"
    path.write_text(USER_ENV)
    # The taskset may leave `target` to the rows, so the config check cannot miss it ...
    assert check_env(f"{path}:Counter") == []
    # ... but a task whose row does not give it either cannot start.
    with pytest.raises(ConfigError, match=r"^workflow_args\.env_args: environment '.*:Counter' needs 'target'; give "
                                          r"them in workflow_args\.env_args or in every task row's env_args$"):
        make_env(f"{path}:Counter", {"start": 2})


def test_bad_names_and_arguments_name_the_key_and_what_is_accepted(tmp_path: Path) -> None:
    accepted = "accepted: desc, describe_surroundings, is_slippery, max_steps, p, show_map, size."
    assert check_env("frozen_lake", {"sise": 4}) == [
        f"workflow_args.env_args: 'sise' not accepted by environment 'frozen_lake'; {accepted}"]
    with pytest.raises(ConfigError, match=r"^workflow_args\.env_args: 'sise' not accepted by environment "
                                          rf"'frozen_lake'; {re.escape(accepted)}$"):
        make_env("frozen_lake", {"sise": 4})
    with pytest.raises(ConfigError, match=r"^workflow_args\.env_args\.size: 'big' must be an integer"):
        make_env("frozen_lake", {"size": "big"})
    assert check_env("frozenlake") == [("workflow_args.env: unknown environment 'frozenlake'; known: calculator, "
                                        "frozen_lake, sokoban, trinity_frozen_lake (or your own class as "
                                        "'module:Class').")]
    assert check_env(None) == [("workflow_args.env: None is no environment; name one of calculator, frozen_lake, "
                                "sokoban, trinity_frozen_lake or your own class as 'module:Class'")]
    assert check_env("sokoban", ["dim_room"]) == [
        "workflow_args.env_args: ['dim_room'] must be a mapping of argument names to values"]
    path = tmp_path / "my_envs.py"
    path.write_text(USER_ENV)
    assert check_env(f"{path}:NoStep") == [(f"workflow_args.env: '{path}:NoStep' is not a text environment class "
                                            "(it has no step()); see rfthpc.envs.base.TextEnv for the interface")]
    assert check_env(f"{path}:nothing")[0].startswith("workflow_args.env: module ")
    with pytest.raises(ConfigError, match=r"is not a text environment class \(it has no step\(\)\)"):
        make_env(f"{path}:NoStep")


CHECK = """
import json, sys
from rfthpc.envs.registry import check_env
problems = [check_env("frozen_lake", {"size": 4, "is_slippery": False}), check_env("sokoban", {"dim_room": [6, 6]}),
            check_env("calculator", {"max_steps": 4}), check_env("trinity_frozen_lake", {"size": 4, "p": 0.7}),
            check_env("frozen_lake", {"slippery": True})]
loaded = [m for m in ("gymnasium", "numpy", "math_verify", "rfthpc.envs.frozen_lake", "rfthpc.envs.sokoban",
                      "rfthpc.envs.calculator", "rfthpc.envs.trinity_frozen_lake") if m in sys.modules]
print(json.dumps({"problems": problems, "loaded": loaded}))
"""


def test_checking_builtins_imports_neither_them_nor_gymnasium() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=True)
    out = json.loads(done.stdout)
    assert out["problems"][:4] == [[], [], [], []]
    assert out["problems"][4][0].startswith("workflow_args.env_args: 'slippery' not accepted by environment")
    assert out["loaded"] == []
