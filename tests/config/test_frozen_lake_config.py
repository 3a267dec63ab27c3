"""Trinity-RFT's FrozenLake example (`examples/grpo_frozen_lake/frozen_lake.yaml`, copied as
tests/config/seeds/frozen_lake.yaml) validates as users bring it, with its data as Trinity writes it,
and without importing the environment, gymnasium or torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.errors import ConfigError
from tests.config.conftest import SEEDS

EXAMPLE = SEEDS / "frozen_lake.yaml"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def trinity_data(local_paths: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TRINITY_TASKSET_PATH at a directory of Trinity's FrozenLake splits (train.parquet, test.parquet
    with its columns: seed, size, p, index, uid; no prompt, no answer)."""
    import pandas as pd

    data = local_paths / "data" / "frozenlake"
    data.mkdir(parents=True)
    for split, seed in (("train", 1), ("test", 2)):
        pd.DataFrame([{"seed": seed, "size": 4, "p": 0.8, "index": 0, "uid": f"{seed}_4_0.8"}]).to_parquet(
            data / f"{split}.parquet")
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(data))
    return data


def test_the_example_validates_with_trinitys_data_and_notes_the_unread_keys(trinity_data: Path) -> None:
    loaded = load_config(EXAMPLE)
    cfg = loaded.config
    train, evaluation = cfg.buffer.explorer_input.tasksets[0], cfg.buffer.explorer_input.eval_tasksets[0]
    assert train.default_workflow_type == evaluation.default_workflow_type == "frozen_lake_workflow"
    assert train.path == str(trinity_data) and (train.split, evaluation.split) == ("train", "test")
    assert train.rollout_args.max_tokens == 10240, "the episode's response budget (Trinity's)"
    [note] = [n for n in loaded.notes if "env_max_steps" in n]
    assert note.startswith("buffer.explorer_input.tasksets[0].workflow_args.env_max_steps, "
                           "buffer.explorer_input.tasksets[0].workflow_args.agent_max_steps, "
                           "buffer.explorer_input.eval_tasksets[0].workflow_args.env_max_steps, "
                           "buffer.explorer_input.eval_tasksets[0].workflow_args.agent_max_steps: ignored: "
                           "Trinity-RFT's frozen_lake_workflow reads neither")


def test_bad_workflow_args_are_reported_at_validation(trinity_data: Path, tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace("        is_slippery: false\n    eval_tasksets:",
                                       "        is_slippery: 0\n        max_step: 8\n    eval_tasksets:")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert "tasksets[0].workflow_args: 'max_step' not used by workflow 'frozen_lake_workflow'; it takes: " \
           "max_steps, is_slippery, desc, use_multistep_prompt" in str(e.value)


CHECK = """
import contextlib, io, json, sys
from rfthpc.cli import main
err = io.StringIO()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
    code = main(["config", "validate", "--no-path-checks", "--config", sys.argv[1]])
heavy = [m for m in ("torch", "gymnasium", "rfthpc.envs.trinity_frozen_lake") if m in sys.modules]
print(json.dumps({"code": code, "stderr": err.getvalue(), "heavy": heavy}))
"""


def test_rfthpc_config_validate_accepts_the_example_without_importing_the_environment(tmp_path: Path) -> None:
    env = {**os.environ, "TRINITY_MODEL_PATH": str(tmp_path / "no-model"), "TRINITY_TASKSET_PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", CHECK, str(EXAMPLE)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True, env=env)
    out = json.loads(done.stdout)
    assert out["code"] == 0, out["stderr"]
    assert "workflow_args.env_max_steps" in out["stderr"]
    # The workflow is imported (to read what it needs); the environment and gymnasium are not.
    assert out["heavy"] == []
