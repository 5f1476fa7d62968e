#!/usr/bin/env bash
# PPO (GAE + critic) on the RLLA data (ToolRL's train_ppo.sh): verl/trainer/config/recipe/ppo.yaml. Launch variables
# (verl/trainer/launch.py) and key=value arguments override it.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=ppo "$@"
