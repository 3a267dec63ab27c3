"""Algorithm functions declare their names and needs beside their definition (`rfthpc.algorithms.declare`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rfthpc import algorithms
from rfthpc.algorithms.declare import Needs, builtins, declare, declared
from rfthpc.errors import ConfigError


def test_builtins_are_found_from_their_declarations() -> None:
    table = builtins()
    assert table["advantage"]["gae"] == ("rfthpc.algorithms.advantages:ppo", Needs(critic=True))
    assert table["policy_loss"]["ppo"][1].old_log_prob == "proximal"
    assert table["policy_loss"]["vanilla"][0] == "rfthpc.algorithms.policy_loss:pg"
    assert algorithms.ADVANTAGE_FNS.needs("grpo").groups and not algorithms.ADVANTAGE_FNS.needs("reinforce").groups
    assert algorithms.POLICY_LOSS_FNS.needs("tis").old_log_prob == "behaviour"


def test_the_registry_reads_needs_without_importing_torch() -> None:
    code = ("import sys; from rfthpc import algorithms as a; "
            "assert a.ADVANTAGE_FNS.needs('ppo').critic and a.needs_groups('rloo'); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_user_function_declares_its_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_algos.py").write_text(
        "from rfthpc.algorithms.declare import declare\n\n"
        "@declare('advantage', groups=True, forward_outputs=['sum_pi_squared'])\n"
        "def mine(inputs, *, scale=1.0):\n    return inputs, inputs\n\n"
        "def plain(inputs):\n    return inputs, inputs\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    needs = algorithms.ADVANTAGE_FNS.needs("my_algos:mine")
    assert needs.groups and needs.forward_outputs == ("sum_pi_squared",)
    assert algorithms.needs_groups("my_algos:mine") and not algorithms.needs_groups("my_algos:plain")
    assert declared(algorithms.ADVANTAGE_FNS.bind("my_algos:mine", {"scale": 2.0})).needs == needs


def test_a_bad_declaration_is_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown need\(s\) critics; known: .*critic"):
        declare("advantage", critics=True)
    with pytest.raises(ConfigError, match="unknown kind 'loss'"):
        declare("loss")
    with pytest.raises(ConfigError, match="forward_outputs"):
        declare("advantage", forward_outputs=("logits",))
