#!/usr/bin/env bash
# GRPO on the RLLA data (ToolRL's train_grpo.sh). Every variable below can be overridden from the environment;
# extra arguments are passed to main_ppo as Hydra overrides (e.g. `bash train_grpo.sh trainer.total_training_steps=5`).
set -euo pipefail
cd "$(dirname "$0")"
export WITHLENGTH=${WITHLENGTH:-0} REFINEDREWARD=${REFINEDREWARD:-0} COARSEREWARD=${COARSEREWARD:-0}
export STRICTMATCH=${STRICTMATCH:-0} CORRECTMAX1=${CORRECTMAX1:-0} MAX1STEP30MAX3=${MAX1STEP30MAX3:-0}
export SCHEDULEREWARD=${SCHEDULEREWARD:-0} SCHEDULELENGTH=${SCHEDULELENGTH:-0}
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-grpo-qwen-chatml-tiny}
source scripts/hw_defaults.sh
bash ./examples/grpo_trainer/run_grpo.sh "$@"
