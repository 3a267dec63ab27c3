"""`explorer.env_vars` are in the explorer process's environment before its explorer (and so its
engines) starts: `rfthpc explore` is what `rfthpc run` and the Slurm jobs start."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

import rfthpc.commands.explore as explore_command
import rfthpc.explorer.loop as explorer_loop
from rfthpc.cli import main
from rfthpc.config import dump_yaml, load_config
from rfthpc.rundir.paths import RunDir

CONFIG = """
model:
  model_path: {root}
  max_prompt_tokens: 16
  max_response_tokens: 16
buffer:
  explorer_input:
    taskset: {{path: {root}}}
explorer:
  env_vars:
    RFTHPC_TEST_GIVEN: from-config
    RFTHPC_TEST_NUMBER: 3
"""


def test_explore_sets_env_vars_before_the_explorer_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(textwrap.dedent(CONFIG).format(root=tmp_path))
    run = RunDir(tmp_path / "run").create()
    run.config.write_text(dump_yaml(load_config(path).base))
    # Registered, so that the test's end restores them.
    monkeypatch.setenv("RFTHPC_TEST_GIVEN", "inherited")
    monkeypatch.setenv("RFTHPC_TEST_NUMBER", "0")
    seen: dict[str, str] = {}

    class Explorer:
        def __init__(self, *args: object, **kwargs: object) -> None:
            seen.update((k, os.environ[k]) for k in ("RFTHPC_TEST_GIVEN", "RFTHPC_TEST_NUMBER"))

        def run(self) -> int:
            return 0

    def exit_process(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(explorer_loop, "Explorer", Explorer)
    # The command ends its process without interpreter finalization; here that would end pytest.
    monkeypatch.setattr(explore_command, "exit_process", exit_process)
    with pytest.raises(SystemExit) as ended:
        main(["explore", "--run-dir", str(run.root)])
    assert ended.value.code == 0
    assert seen == {"RFTHPC_TEST_GIVEN": "from-config", "RFTHPC_TEST_NUMBER": "3"}
