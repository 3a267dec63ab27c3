#!/usr/bin/env bash
# Usage: bash tools/setup_agentscope.sh [DIR]
#
# Creates (or reuses) a virtual environment for AgentScope 1.x agents, `.venv-agentscope` in the
# repository root by default, and prints its interpreter: give it as `workflow_args.python` of
# agentscope_react_workflow / agentscope_react_math_workflow / agent_workflow. AgentScope 1.0.21 imports
# names that `mcp` 2.x dropped, while vLLM requires mcp 2.x, so the two cannot share one environment;
# rfthpc runs each agent episode in a process of this interpreter instead. The pins below are the
# set measured to import and run (see docs/agents.md).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.venv-agentscope}"
py="${PYTHON:-python3}"
stamp="$dir/.rfthpc-agentscope"
pins=("agentscope==1.0.21" "mcp>=1.13,<2" "openai>=1.40,<3.25" greenlet tqdm)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${pins[*]}" ]; then
  [ -x "$dir/bin/python" ] || "$py" -m venv "$dir"
  "$dir/bin/python" -m pip install --disable-pip-version-check -q "${pins[@]}" 2> >(grep -v "^WARNING: Location" >&2)
  echo "${pins[*]}" > "$stamp"
fi
echo "$(cd "$dir" && pwd)/bin/python"
