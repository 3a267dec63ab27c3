"""Run directories for explorer tests: a tiny model, GSM8K-format data files, a config, helpers to
read back what the explorer wrote."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engines.conftest import tiny_model  # noqa: F401  (session fixture)

HERE = Path(__file__).parent
USER_REWARDS = HERE / "user_rewards.py"
IMPOSSIBLE = "#### 987654321"
"""A reference answer the untrained tiny model cannot produce in a few tokens."""


def write_jsonl(path: Path, records: list[dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def taskset(name: str, path: Path, **extra: Any) -> dict[str, Any]:
    """A taskset entry reading question/answer columns of a jsonl file."""
    return {"name": name, "path": str(path), "format": {"prompt_key": "question", "response_key": "answer"}, **extra}


def make_run(tmp_path: Path, model_dir: Path, tasksets: list[dict], **over: Any) -> Path:
    """Write a config, create its run directory as `rfthpc run` does, and return the run directory."""
    from rfthpc.config import load_config
    from rfthpc.launch.run_dir import prepare_run_dir

    cfg = {
        "project": "test", "name": "explore", "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": str(model_dir), "max_prompt_tokens": 96, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 2, "explorer_input": {"tasksets": tasksets}},
        "explorer": {"runner_per_model": 4, "eval_on_startup": False,
                     "rollout_model": {"engine_type": "transformers", "cpu_kvcache_space_gb": 1}},
        "synchronizer": {"sync_interval": 1, "sync_offset": 100, "sync_timeout": 120},
        "filesystem": {"poll_interval_s": 0.2},
        "monitor": {"monitor_type": "console"},
    }
    cfg = _merge(cfg, over)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return prepare_run_dir(load_config(path)).root


def groups(run_dir: Path) -> list:
    """Every group committed to the run's store."""
    from rfthpc.store.chunks import read_chunk
    from rfthpc.store.layout import list_chunks, open_store

    out = []
    for ref in sorted(list_chunks(open_store(run_dir)), key=lambda r: (r.rank, r.seq)):
        out.extend(read_chunk(ref.path)[1])
    return out


def claims_state(run_dir: Path, name: str) -> dict[str, Any]:
    from rfthpc.tasks.claims import read_state, shard_journal

    return read_state(shard_journal(run_dir, name, 0))[1]


def metrics(run_dir: Path, name: str = "explorer", rank: int = 0) -> list[dict[str, Any]]:
    from rfthpc.rundir.metrics import read_metrics

    return read_metrics(run_dir / "monitor" / f"explorer_{name}_{rank}.jsonl")


def progress(run_dir: Path, name: str = "explorer", rank: int = 0) -> dict[str, Any]:
    from rfthpc.sharedfs.fileops import read_json

    return read_json(run_dir / "explorer_meta" / name / f"{rank}.json", {}) or {}


def explorer(run_dir: Path, rank: int = 0, engine_factory=None):
    """An in-process explorer of the run (its resolved config, as `rfthpc explore` reads it); its engines
    from `engine_factory` if given."""
    from rfthpc.config import load_resolved
    from rfthpc.config.settings import explorer_settings
    from rfthpc.engines import make_engine
    from rfthpc.explorer.loop import Explorer

    return Explorer(run_dir, "explorer", rank, explorer_settings(load_resolved(run_dir / "config.yaml").stages),
                    engine_factory=engine_factory or make_engine)


@pytest.fixture
def questions() -> list[dict[str, str]]:
    """GSM8K-shaped records whose answers the tiny model cannot know."""
    return [{"question": f"Tom has {i} apples and buys {i + 2} more. How many apples does Tom have?",
             "answer": f"{i} + {i + 2} = {2 * i + 2}\n{IMPOSSIBLE}"} for i in range(6)]
