#!/usr/bin/env bash
# GSPO (arXiv 2507.18071) on the RLLA data: the grpo recipe with the sequence-level ratio.
# Settings: verl/trainer/config/recipe/gspo.yaml (its header says what it is for, how long it takes and what to see).
# Launch variables (verl/trainer/launch.py) and key=value arguments override it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=gspo "$@"
