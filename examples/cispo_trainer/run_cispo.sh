#!/usr/bin/env bash
# CISPO (arXiv 2506.13585) on the RLLA data: the grpo recipe with the clipped importance weight.
# Settings: verl/trainer/config/recipe/cispo.yaml (its header says what it is for, how long it takes and what to see).
# Launch variables (verl/trainer/launch.py) and key=value arguments override it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=cispo "$@"
