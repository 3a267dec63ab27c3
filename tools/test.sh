#!/usr/bin/env bash
# Usage: bash tools/test.sh [pytest args...]
#
# The README's test command: sets up `.venv` (tools/setup_env.sh), starts the local Slurm cluster
# the integration tests submit to (tools/local_slurm.sh up; needs root on Debian/Ubuntu), then
# runs the whole test suite. Extra arguments go to pytest (e.g. `-k store -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
bash tools/local_slurm.sh up
exec .venv/bin/python -m pytest tests "$@"
