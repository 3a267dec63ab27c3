#!/usr/bin/env bash
# Usage: bash tools/gpu_check.sh [--wheels DIR]
#
# Runs tools/gpu_check.py: trainer steps with FSDP2 on one rank (bf16 on CUDA), full and delta weight
# publishing, transformers-engine rollouts on the GPU, a checkpoint conversion; ends with a FIGURES line.
# Without a GPU it runs the same path on CPU (float32), which the test suite does.
#
# Python: .venv/bin/python when the repo has one, else $PYTHON or python3 (a GPU machine's own PyTorch).
# Compute nodes have no internet: with --wheels DIR, the Python packages rfthpc needs that are missing
# are installed from the wheel files in DIR (`pip download` them where there is internet).
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=""
if [[ "${1:-}" == "--wheels" ]]; then
  wheels="${2:?--wheels needs a directory}"
fi
if [[ -x .venv/bin/python ]]; then
  py=.venv/bin/python
else
  py="${PYTHON:-python3}"
fi
if [[ -n "$wheels" ]]; then
  # torch stays the machine's own (its CUDA build); only what is missing comes from the wheels.
  missing=$("$py" - <<'EOF'
import importlib.util
import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
modules = {"pyyaml": "yaml", "math-verify": "math_verify"}
for dep in deps:
    name = dep.split(">")[0].split("=")[0].split("<")[0].strip()
    if name != "torch" and importlib.util.find_spec(modules.get(name, name.replace("-", "_"))) is None:
        print(dep)
EOF
)
  if [[ -n "$missing" ]]; then
    # shellcheck disable=SC2086
    "$py" -m pip install --no-index --find-links "$wheels" $missing
  fi
fi
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$py" tools/gpu_check.py
