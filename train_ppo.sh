#!/usr/bin/env bash
# PPO (GAE + critic) on the RLLA data (ToolRL's train_ppo.sh). Variables and extra arguments as in train_grpo.sh.
set -euo pipefail
cd "$(dirname "$0")"
export WITHLENGTH=${WITHLENGTH:-0} REFINEDREWARD=${REFINEDREWARD:-0} COARSEREWARD=${COARSEREWARD:-0}
export STRICTMATCH=${STRICTMATCH:-0} CORRECTMAX1=${CORRECTMAX1:-0} MAX1STEP30MAX3=${MAX1STEP30MAX3:-0}
export SCHEDULEREWARD=${SCHEDULEREWARD:-0} SCHEDULELENGTH=${SCHEDULELENGTH:-0}
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-ppo-qwen-chatml-tiny}
: "${ROLLOUT_N:=1}"
source scripts/hw_defaults.sh
bash ./examples/ppo_trainer/run_ppo.sh "$@"
