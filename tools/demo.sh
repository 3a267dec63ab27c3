#!/usr/bin/env bash
# Usage: bash tools/demo.sh
#
# The README's main job: sets up `.venv` (tools/setup_env.sh), then checks every shipped config
# with `rfthpc config validate` (model and dataset paths are not required to exist here).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
for cfg in configs/*.yaml configs/*/*.yaml; do
  .venv/bin/rfthpc config validate --no-path-checks --config "$cfg"
done
