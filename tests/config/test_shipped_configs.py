"""Every config shipped in configs/ parses and validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from tests.config.conftest import CONFIGS

SHIPPED = ["grpo.yaml", "async/explorer.yaml", "async/trainer.yaml", "async/explorer_new.yaml", "tiny-cpu.yaml",
           "tiny-cpu-lora.yaml", "frozenlake-cpu.yaml",
           "distill-cpu.yaml", "examples/verl-gspo.yaml", "examples/trinity-sapo.yaml", "examples/trinity-raft.yaml",
           "examples/trinity-chord.yaml", "examples/agent-openai.yaml", "examples/trinity-agentscope-react.yaml",
           "examples/agent-openai-agents-sdk.yaml"]


def test_the_list_covers_every_shipped_config() -> None:
    on_disk = sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml"))
    assert on_disk == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_config_validates(name: str, local_paths: Path, monkeypatch: pytest.MonkeyPatch,
                                  agentscope_python: str) -> None:
    demo = local_paths / "demo"
    # The distillation demo's student and teacher (tools/demo_distill.sh) beside the demo's own.
    for d in ("model", "gsm8k", "student", "teacher"):
        (demo / d).mkdir(parents=True)
    (demo / "teacher" / "config.json").write_text("{}")
    (demo / "sft.jsonl").write_text("")
    # The agentic demo's (`rfthpc make-demo --task frozenlake`): tasks are environment seeds.
    (demo / "frozenlake" / "model").mkdir(parents=True)
    (demo / "frozenlake" / "sft.jsonl").write_text("")
    for split in ("train", "test"):
        (demo / "frozenlake" / f"{split}.jsonl").write_text('{"prompt": "frozen_lake size 4 seed 1", "env_args": '
                                                            '{"size": 4, "seed": 1, "is_slippery": false}}\n')
    monkeypatch.setenv("RFTHPC_DEMO_DIR", str(demo))
    monkeypatch.setenv("RFTHPC_TEACHER_MODEL", str(demo / "teacher"))
    monkeypatch.setenv("RFTHPC_AGENTSCOPE_PYTHON", agentscope_python)  # the AgentScope example's interpreter
    loaded = load_config(CONFIGS / name)
    assert loaded.config.project and loaded.config.name
    for stage in loaded.stages:
        assert stage.config.buffer.train_batch_size % stage.config.algorithm.repeat_times == 0


def test_async_pair_shares_one_run_directory(local_paths: Path) -> None:
    cfgs = [load_config(CONFIGS / "async" / n).config for n in ("explorer.yaml", "trainer.yaml", "explorer_new.yaml")]
    assert len({(c.checkpoint_root_dir, c.project, c.name) for c in cfgs}) == 1
    assert [c.mode for c in cfgs] == ["explore", "train", "explore"]
    assert cfgs[2].explorer.name != cfgs[0].explorer.name


def test_tiny_cpu_demo_runs_sft_then_grpo(local_paths: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    demo = local_paths / "demo"
    monkeypatch.setenv("RFTHPC_DEMO_DIR", str(demo))
    loaded = load_config(CONFIGS / "tiny-cpu.yaml", check_paths=False)
    sft, rft = (s.config for s in loaded.stages)
    assert sft.algorithm.algorithm_type == "sft" and sft.mode == "train"
    assert rft.algorithm.algorithm_type == "grpo" and rft.cluster.gpu_per_node == 0
    assert rft.explorer.rollout_model.engine_type == "vllm"


def test_the_lora_demo_is_the_demo_with_an_adapter(local_paths: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """configs/tiny-cpu-lora.yaml is the demo's two stages with an adapter (and its own learning rates)."""
    monkeypatch.setenv("RFTHPC_DEMO_DIR", str(local_paths / "demo"))
    full = load_config(CONFIGS / "tiny-cpu.yaml", check_paths=False)
    lora = load_config(CONFIGS / "tiny-cpu-lora.yaml", check_paths=False)
    assert [s.config.model.lora for s in full.stages] == [None, None]
    for a, b in zip(full.stages, lora.stages, strict=True):
        assert b.config.model.lora is not None and b.config.model.lora.lora_rank == 64
        assert b.config.algorithm.algorithm_type == a.config.algorithm.algorithm_type
        assert b.config.buffer.total_steps == a.config.buffer.total_steps
