"""The distillation CPU demo's figures (`bash tools/demo_distill.sh`, configs/distill-cpu.yaml).

A student of ~0.26M parameters (`rfthpc tiny-model --size student`) is warmed up on the demo's SFT
data and then distilled on-policy from the demo's own RL-trained model (a finished
`configs/tiny-cpu.yaml` run). The figures compare the student's held-out greedy accuracy after the
warm-up and after distillation with the teacher's, and the per-token reverse KL from the student to
the teacher at the start and at the end of distillation (`distill/reverse_kl`).
"""

from __future__ import annotations

from pathlib import Path

from rfthpc.demos.figures import demo_figures, last_stage_start
from rfthpc.errors import UserError
from rfthpc.rundir.metrics import read_metrics

KL_WINDOW = 10
"""Trainer steps averaged for the reverse KL at the start and at the end of distillation."""


def reverse_kl_ends(run_dir: Path) -> tuple[float, float]:
    """(mean reverse KL over the first KL_WINDOW distillation steps, over the last KL_WINDOW)."""
    start = last_stage_start(run_dir)
    kls = [float(r["distill/reverse_kl"]) for r in read_metrics(Path(run_dir) / "monitor" / "trainer.jsonl")
           if int(r["step"]) > start and "distill/reverse_kl" in r]
    if len(kls) < KL_WINDOW:
        raise UserError(f"{run_dir}: {len(kls)} distillation steps logged distill/reverse_kl; the figures need at "
                        f"least {KL_WINDOW}. Is the run finished? See {run_dir}/log/")
    return sum(kls[:KL_WINDOW]) / KL_WINDOW, sum(kls[-KL_WINDOW:]) / KL_WINDOW


def print_figures(teacher_run: str | Path, student_run: str | Path, wall_s: float) -> None:
    """Print the demo's summary line: `FIGURES acc_teacher=… acc_student_sft=… acc_student=… …`."""
    teacher = demo_figures(Path(teacher_run))[1]
    sft, distilled = demo_figures(Path(student_run))
    kl_first, kl_last = reverse_kl_ends(Path(student_run))
    print(f"FIGURES acc_teacher={teacher:.3f} acc_student_sft={sft:.3f} acc_student={distilled:.3f} "
          f"reverse_kl_first={kl_first:.3f} reverse_kl_last={kl_last:.3f} wall_s={wall_s:.0f}")
