#!/usr/bin/env bash
# Usage: bash tools/demo_distill.sh
#
# The distillation CPU demo (docs/demo.md, "Distillation"). Sets up `.venv` (tools/setup_env.sh),
# makes the demo's model and data (`rfthpc make-demo`) and a smaller student (`rfthpc tiny-model
# --size student`, ~0.26M parameters against the demo model's 0.46M, the same tokenizer), then
#   1. the teacher: the demo itself (`rfthpc run --config configs/tiny-cpu.yaml`, SFT warm-up then GRPO),
#      unless $RFTHPC_TEACHER_MODEL already names a model (e.g. the HF copy of an earlier demo run);
#   2. the student: `rfthpc run --config configs/distill-cpu.yaml` (SFT warm-up, then on-policy
#      distillation from the teacher),
# writes the student run's charts (`rfthpc plot`: held-out accuracy, and the reverse KL beside the
# reward) and ends by printing
#   FIGURES acc_teacher=… acc_student_sft=… acc_student=… reverse_kl_first=… reverse_kl_last=… wall_s=…
# (held-out greedy accuracy of the teacher, of the student after its warm-up and after distillation; the
# per-token reverse KL to the teacher over the first and last 10 distillation steps) where wall_s counts
# everything after the environment set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
export RFTHPC_DEMO_DIR="${RFTHPC_DEMO_DIR:-$PWD/demo-data}"
export RFTHPC_CHECKPOINT_ROOT_DIR="${RFTHPC_CHECKPOINT_ROOT_DIR:-$PWD/checkpoints}"
stamp="$(date +%Y%m%d-%H%M%S)"
start=$(date +%s.%N)
.venv/bin/rfthpc make-demo --out "$RFTHPC_DEMO_DIR"
.venv/bin/rfthpc tiny-model --size student --out "$RFTHPC_DEMO_DIR/student"
teacher_run="$RFTHPC_CHECKPOINT_ROOT_DIR/rfthpc-demo/teacher-$stamp"
if [ -z "${RFTHPC_TEACHER_MODEL:-}" ]; then
  .venv/bin/rfthpc run --config configs/tiny-cpu.yaml --name "teacher-$stamp"
  RFTHPC_TEACHER_MODEL="$(ls -d "$teacher_run"/global_step_*/actor/huggingface | sort -V | tail -1)"
  export RFTHPC_TEACHER_MODEL
fi
student="distill-cpu-$stamp"
student_run="$RFTHPC_CHECKPOINT_ROOT_DIR/rfthpc-demo/$student"
.venv/bin/rfthpc run --config configs/distill-cpu.yaml --name "$student"
.venv/bin/rfthpc plot "$student_run"
wall=$(.venv/bin/python -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
echo "charts: $student_run/monitor/plots/overview.png; walk-through: docs/demo.md"
# The teacher's accuracy is read from its run: the one made here, else the run that holds $RFTHPC_TEACHER_MODEL.
[ -d "$teacher_run" ] || teacher_run="$(cd "$RFTHPC_TEACHER_MODEL/../../.." && pwd)"
.venv/bin/python -c "import sys; from rfthpc.demos.distill import print_figures; print_figures(sys.argv[1], sys.argv[2], float(sys.argv[3]))" \
  "$teacher_run" "$student_run" "$wall"
