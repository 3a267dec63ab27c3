#!/usr/bin/env bash
# Usage: bash tools/demo_agent.sh
#
# The agentic CPU demo (docs/agents.md, "The FrozenLake demo"). Sets up `.venv`
# (tools/setup_env.sh), makes the demo's model, maps and demonstrations (`rfthpc make-demo --task
# frozenlake` into $RFTHPC_DEMO_DIR/frozenlake, default ./demo-data/frozenlake), runs
# `rfthpc run --config configs/frozenlake-cpu.yaml` (an SFT warm-up, then GiGPO with vLLM rollouts
# over step-wise env_workflow episodes) as a new run under $RFTHPC_CHECKPOINT_ROOT_DIR (default ./checkpoints), writes
# its charts (`rfthpc plot`), and ends by printing
#   FIGURES success_sft=<held-out success rate after the warm-up> success_rft=<after RFT> greedy_sft=… greedy_rft=… wall_s=<seconds>
# (success_*: the held-out maps played at temperature 1, 4 episodes each; greedy_*: at temperature 0)
# where wall_s counts everything after the environment set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
export RFTHPC_DEMO_DIR="${RFTHPC_DEMO_DIR:-$PWD/demo-data}"
export RFTHPC_CHECKPOINT_ROOT_DIR="${RFTHPC_CHECKPOINT_ROOT_DIR:-$PWD/checkpoints}"
name="frozenlake-cpu-$(date +%Y%m%d-%H%M%S)"
run_dir="$RFTHPC_CHECKPOINT_ROOT_DIR/rfthpc-demo/$name"
start=$(date +%s.%N)
.venv/bin/rfthpc make-demo --task frozenlake --out "$RFTHPC_DEMO_DIR/frozenlake"
.venv/bin/rfthpc run --config configs/frozenlake-cpu.yaml --name "$name"
.venv/bin/rfthpc plot "$run_dir"
wall=$(.venv/bin/python -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
echo "charts: $run_dir/monitor/plots/overview.png; walk-through: docs/agents.md"
.venv/bin/python -c "import sys; from rfthpc.demos.frozenlake import print_figures; print_figures(sys.argv[1], float(sys.argv[2]))" \
  "$run_dir" "$wall"
