#!/usr/bin/env bash
# PPO (GAE + critic) on the RLLA data (ToolRL's train_ppo.sh). Variables and extra arguments as in train_grpo.sh.
set -euo pipefail
cd "$(dirname "$0")"
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-ppo-qwen-chatml-tiny}
: "${ROLLOUT_N:=1}"
RESUME_CHECK_DIR=checkpoints/TinyZero/$EXPERIMENT_NAME  # trainer.default_local_dir
source scripts/hw_defaults.sh
# ToolRL's project name (TinyZero) is kept; metrics and plots go to $RUN_DIR
RUN_DIR=${RUN_DIR:-outputs/TinyZero/$EXPERIMENT_NAME}
bash ./examples/ppo_trainer/run_ppo.sh trainer.run_dir="$RUN_DIR" "$@"
"$PYTHON" scripts/plot_metrics.py "$RUN_DIR/metrics.jsonl"
