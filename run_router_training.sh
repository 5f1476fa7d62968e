#!/usr/bin/env bash
# The main job: the budgeted tool router on the real RLLA data. Its settings are one recipe file:
# verl/trainer/config/recipe/router_value_ridge.yaml without a GPU, router_option_a.yaml with one (ROUTER_RECIPE
# chooses; docs/recipes.md). Launch variables (BASE_MODEL, BUDGET_B, TRAIN_BATCH_SIZE, ...: verl/trainer/launch.py)
# and key=value arguments override it. Kill it at any time and run it again to resume.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=router "$@"
