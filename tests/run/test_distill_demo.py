"""The distillation demo's config (`configs/distill-cpu.yaml`, `bash tools/demo_distill.sh`) runs as shipped, shortened:
the student's SFT warm-up, then on-policy distillation with vLLM rollouts and a teacher scored in the trainer, and
the demo's figures and charts read from the finished run; and with the teacher served beside the explorer instead
(`explorer.teacher_model`, an auxiliary model): each stored sample carries the teacher's log-probabilities, equal
to a forward pass of the teacher, and the trainer trains on them. (How much it learns is measured by the script
itself, docs/demo.md: a run takes minutes.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from rfthpc.demos.distill import KL_WINDOW, print_figures
from rfthpc.rundir.metrics import read_metrics
from tests.run.conftest import ROOT, env_for, finish, rfthpc

SFT_STEPS = 4
DISTILL_STEPS = KL_WINDOW + 2


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("served", [False, True], ids=["teacher_in_trainer", "teacher_beside_explorer"])
def test_distill_demo_config_runs_and_reports(demo_dir: Path, tmp_path: Path, served: bool,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from rfthpc.demos.tinymodel import build_tiny_model

    build_tiny_model(demo_dir / "student", "student", seed=0)
    raw = yaml.safe_load((ROOT / "configs" / "distill-cpu.yaml").read_text())
    raw["buffer"]["total_steps"] = DISTILL_STEPS
    raw["explorer"]["eval_interval"] = 1000
    raw["stages"][0]["buffer"]["total_steps"] = SFT_STEPS
    if served:
        teacher_path = raw["model"].pop("teacher_model_path")
        raw["explorer"]["auxiliary_models"] = [{"name": "teacher", "model_path": teacher_path,
                                                "placement": "per_explorer", "engine_type": "transformers",
                                                "dtype": "float32"}]
        raw["explorer"]["teacher_model"] = "teacher"
        raw["filesystem"] = {"keep_consumed_chunks": True}  # read back below
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
    if served:
        check_stored_teacher_scores(run_dir, demo_dir / "model")

    # Both runs of the demo's figures may be the one run here: its evaluations at the start and the end of distillation.
    print_figures(run_dir, run_dir, wall_s=1.0)
    figures = capsys.readouterr().out.strip()
    assert figures.startswith("FIGURES acc_teacher=") and "reverse_kl_first=" in figures, figures

    code, out, err = finish(rfthpc("plot", str(run_dir), env=env), 120)
    assert code == 0, err
    assert (run_dir / "monitor" / "plots" / "reward.png").stat().st_size > 10_000


def check_stored_teacher_scores(run_dir: Path, teacher: Path) -> None:
    """Every stored training sample carries the teacher's log-probability of each response token, as a forward
    pass of the teacher gives it (temperature 1); evaluation samples carry none."""
    from rfthpc.store.chunks import read_chunk
    from tests.engines.helpers import forward_logprobs, load_hf

    model = load_hf(teacher)
    groups = [g for path in sorted((run_dir / "experiences").rglob("*.h5")) for g in read_chunk(path)[1]]
    training = [g for g in groups if not g.is_eval]
    assert training and all(e.teacher_logprobs is not None for g in training for e in g.experiences)
    assert all(e.teacher_logprobs is None for g in groups if g.is_eval for e in g.experiences)
    for e in training[0].experiences[:4]:
        ref = forward_logprobs(model, e.prompt_ids.tolist(), e.response_ids.tolist(), 1.0, -1)
        assert float((torch.tensor(e.teacher_logprobs) - ref).abs().max()) <= 1e-4

