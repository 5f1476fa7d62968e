#!/usr/bin/env bash
# Multi-turn agent training (GiGPO by default), e.g. ENV_NAME=line_world ESTIMATOR=rlvcr bash examples/gigpo_trainer/run_agent.sh
# Settings: verl/trainer/config/recipe/agent.yaml (its header says what it is for, how long it takes and what to see).
# Launch variables (verl/trainer/launch.py) and key=value arguments override it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=agent "$@"
