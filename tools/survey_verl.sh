#!/bin/bash
# Survey veRL's launch scripts: which does `rfthpc config import --from verl` accept?
#
# usage: tools/survey_verl.sh VERL_CHECKOUT [OUT_DIR] [SCRIPTS_GLOB]
#   VERL_CHECKOUT  a veRL checkout (its verl/trainer/config is read as the installed veRL's would be;
#                  veRL itself is not imported)
#   OUT_DIR        where each script's imported config and messages go (default: a temporary directory)
#   SCRIPTS_GLOB   relative to the checkout (default: examples/grpo_trainer/*.sh)
#
# Each script is imported from the checkout's root (where veRL runs it, so relative paths such as
# recipe/... mean the same); the variables a script expects its user to export are set to
# /placeholder/NAME (a second try, listed in NAME.env), as tools/survey_configs.py does for configs;
# an imported config is checked again by `rfthpc config validate --no-path-checks`. Prints one line
# per script (ACCEPTED, REFUSED: exit 2, CRASHED: a traceback or another exit code), then
# `FIGURES verl_scripts=N accepted=A refused=R crashed=C`.
set -u
VERL=$(cd "${1:?usage: tools/survey_verl.sh VERL_CHECKOUT [OUT_DIR] [SCRIPTS_GLOB]}" && pwd)
OUT=${2:-$(mktemp -d)}
GLOB=${3:-examples/grpo_trainer/*.sh}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$REPO:$VERL"
cd "$VERL" || exit 2
accepted=0 refused=0 crashed=0
for script in $GLOB; do
  name=$(basename "$script" .sh)
  import() { env "$@" "$PY" -m rfthpc config import --from verl "$script" --out "$OUT/$name.yaml" \
               >"$OUT/$name.out" 2>"$OUT/$name.err"; }
  import; rc=$?
  missing=$(grep -o '[A-Za-z_0-9]* is neither set by the script nor in the environment' "$OUT/$name.err" \
            | cut -d' ' -f1 | sort -u)
  if [ -n "$missing" ]; then
    placeholders=$(for v in $missing; do echo "$v=/placeholder/$v"; done)
    echo "$placeholders" >"$OUT/$name.env"
    # shellcheck disable=SC2086
    import $placeholders; rc=$?
  fi
  if [ $rc -eq 0 ]; then
    "$PY" -m rfthpc config validate --no-path-checks --config "$OUT/$name.yaml" >>"$OUT/$name.out" \
      2>>"$OUT/$name.err"; rc=$?
  fi
  if grep -q Traceback "$OUT/$name.err" || { [ $rc -ne 0 ] && [ $rc -ne 2 ]; }; then
    status=CRASHED; crashed=$((crashed + 1))
  elif [ $rc -eq 0 ]; then
    status=ACCEPTED; accepted=$((accepted + 1))
  else
    status=REFUSED; refused=$((refused + 1))
  fi
  echo "$status $name"
done
echo "messages in $OUT"
echo "FIGURES verl_scripts=$((accepted + refused + crashed)) accepted=$accepted refused=$refused crashed=$crashed"
