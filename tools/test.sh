#!/usr/bin/env bash
# Usage: bash tools/test.sh [pytest args...]
#
# The README's test command: sets up `.venv` (tools/setup_env.sh), starts the local Slurm cluster
# the integration tests submit to, each of its nodes a client of its own of a shared GlusterFS volume
# (tools/local_slurm.sh up with RFTHPC_SHARED_FS=1, tools/shared_fs.sh; needs root on Debian/Ubuntu
# and /dev/fuse), then runs the whole test suite. Extra arguments go to pytest (e.g. `-k store -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
export RFTHPC_SHARED_FS=1
bash tools/setup_env.sh
bash tools/local_slurm.sh up
exec .venv/bin/python -m pytest tests "$@"
