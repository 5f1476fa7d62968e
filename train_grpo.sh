#!/usr/bin/env bash
# GRPO on the RLLA data (ToolRL's train_grpo.sh): verl/trainer/config/recipe/grpo.yaml. Launch variables
# (verl/trainer/launch.py) and key=value arguments override it, e.g. `bash train_grpo.sh trainer.total_training_steps=5`.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=grpo "$@"
