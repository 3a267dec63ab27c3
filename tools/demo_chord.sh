#!/usr/bin/env bash
# Usage: bash tools/demo_chord.sh
#
# CHORD on the tiny CPU demo (docs/demo.md, "CHORD: SFT+RL mixing"). Sets up `.venv` (tools/setup_env.sh), makes
# the demo's model and data (`rfthpc make-demo` into $RFTHPC_DEMO_DIR, default ./demo-data), runs
# `rfthpc run --config configs/examples/trinity-chord.yaml` (mix_chord from the random model: every step GRPO on
# the rollouts and SFT on rows of the warm-up demonstrations, no warm-up stage) as a new run under
# $RFTHPC_CHECKPOINT_ROOT_DIR (default ./checkpoints), writes its charts (`rfthpc plot`), and ends by printing
#   FIGURES eval_acc_start=<held-out accuracy of the random model> eval_acc_chord=<after CHORD> wall_s=<seconds>
# where wall_s counts everything after the environment set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
export RFTHPC_DEMO_DIR="${RFTHPC_DEMO_DIR:-$PWD/demo-data}"
export RFTHPC_CHECKPOINT_ROOT_DIR="${RFTHPC_CHECKPOINT_ROOT_DIR:-$PWD/checkpoints}"
name="trinity-chord-$(date +%Y%m%d-%H%M%S)"
run_dir="$RFTHPC_CHECKPOINT_ROOT_DIR/rfthpc-examples/$name"
start=$(date +%s.%N)
.venv/bin/rfthpc make-demo --out "$RFTHPC_DEMO_DIR"
.venv/bin/rfthpc run --config configs/examples/trinity-chord.yaml --name "$name"
.venv/bin/rfthpc plot "$run_dir"
wall=$(.venv/bin/python -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
echo "charts: $run_dir/monitor/plots/overview.png; walk-through: docs/demo.md"
.venv/bin/python -c "
import sys
from pathlib import Path
from rfthpc.demos.figures import demo_figures
first, last = demo_figures(Path(sys.argv[1]))
print(f'FIGURES eval_acc_start={first:.3f} eval_acc_chord={last:.3f} wall_s={float(sys.argv[2]):.0f}')" "$run_dir" "$wall"
