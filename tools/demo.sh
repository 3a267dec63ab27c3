#!/usr/bin/env bash
# Usage: bash tools/demo.sh
#
# The README's main job: the tiny CPU demo (docs/demo.md). Sets up `.venv` (tools/setup_env.sh),
# makes the demo's model and data (`rfthpc make-demo` into $RFTHPC_DEMO_DIR, default ./demo-data),
# runs `rfthpc run --config configs/tiny-cpu.yaml` (an SFT warm-up, then GRPO with vLLM rollouts)
# as a new run under $RFTHPC_CHECKPOINT_ROOT_DIR (default ./checkpoints), writes its charts
# (`rfthpc plot`), and ends by printing
#   FIGURES eval_acc_sft=<held-out accuracy after the warm-up> eval_acc_rft=<after RFT> wall_s=<seconds>
# where wall_s counts everything after the environment set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
export RFTHPC_DEMO_DIR="${RFTHPC_DEMO_DIR:-$PWD/demo-data}"
export RFTHPC_CHECKPOINT_ROOT_DIR="${RFTHPC_CHECKPOINT_ROOT_DIR:-$PWD/checkpoints}"
name="tiny-cpu-$(date +%Y%m%d-%H%M%S)"
run_dir="$RFTHPC_CHECKPOINT_ROOT_DIR/rfthpc-demo/$name"
start=$(date +%s.%N)
.venv/bin/rfthpc make-demo --out "$RFTHPC_DEMO_DIR"
.venv/bin/rfthpc run --config configs/tiny-cpu.yaml --name "$name"
.venv/bin/rfthpc plot "$run_dir"
wall=$(.venv/bin/python -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
echo "charts: $run_dir/monitor/plots/overview.png; walk-through: docs/demo.md"
.venv/bin/python -c "import sys; from rfthpc.demos.gsm8k import print_figures; print_figures(sys.argv[1], float(sys.argv[2]))" \
  "$run_dir" "$wall"
