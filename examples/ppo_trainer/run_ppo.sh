#!/usr/bin/env bash
# ToolRL's PPO override list on the RLLA data (the same as train_ppo.sh).
# Settings: verl/trainer/config/recipe/ppo.yaml (its header says what it is for, how long it takes and what to see).
# Launch variables (verl/trainer/launch.py) and key=value arguments override it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=ppo "$@"
