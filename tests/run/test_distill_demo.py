"""The distillation demo's config (`configs/distill-cpu.yaml`, `bash tools/demo_distill.sh`) runs as shipped, shortened:
the student's SFT warm-up, then on-policy distillation with vLLM rollouts and a teacher scored in the trainer, and
the demo's figures and charts read from the finished run. (How much it learns is measured by the script itself,
docs/demo.md: a run takes minutes.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rfthpc.demos.distill import KL_WINDOW, print_figures
from rfthpc.rundir.metrics import read_metrics
from tests.run.conftest import ROOT, env_for, finish, rfthpc

SFT_STEPS = 4
DISTILL_STEPS = KL_WINDOW + 2


@pytest.mark.slow
@pytest.mark.vllm
def test_distill_demo_config_runs_and_reports(demo_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from rfthpc.demos.tinymodel import build_tiny_model

    build_tiny_model(demo_dir / "student", "student", seed=0)
    raw = yaml.safe_load((ROOT / "configs" / "distill-cpu.yaml").read_text())
    raw["buffer"]["total_steps"] = DISTILL_STEPS
    raw["explorer"]["eval_interval"] = 1000
    raw["stages"][0]["buffer"]["total_steps"] = SFT_STEPS
    config = tmp_path / "distill.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    # The teacher: the demo's model itself (random weights; what is checked here is the plumbing).
    env = {**env_for(demo_dir, tmp_path / "ckpt"), "RFTHPC_TEACHER_MODEL": str(demo_dir / "model")}
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env), 900)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    run_dir = tmp_path / "ckpt" / "rfthpc-demo" / "distill-cpu"

    trainer = read_metrics(run_dir / "monitor" / "trainer.jsonl")
    kls = [r["distill/reverse_kl"] for r in trainer if r["step"] > SFT_STEPS]
    assert len(kls) == DISTILL_STEPS and all(kl > 0 for kl in kls), kls
    assert all("distill/reverse_kl" not in r for r in trainer if r["step"] <= SFT_STEPS)

    # Both runs of the demo's figures may be the one run here: its evaluations at the start and the end of distillation.
    print_figures(run_dir, run_dir, wall_s=1.0)
    figures = capsys.readouterr().out.strip()
    assert figures.startswith("FIGURES acc_teacher=") and "reverse_kl_first=" in figures, figures

    code, out, err = finish(rfthpc("plot", str(run_dir), env=env), 120)
    assert code == 0, err
    assert (run_dir / "monitor" / "plots" / "reward.png").stat().st_size > 10_000
