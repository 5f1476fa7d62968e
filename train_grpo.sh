#!/usr/bin/env bash
# GRPO on the RLLA data (ToolRL's train_grpo.sh). Every variable below can be overridden from the environment;
# extra arguments are passed to main_ppo as Hydra overrides (e.g. `bash train_grpo.sh trainer.total_training_steps=5`).
set -euo pipefail
cd "$(dirname "$0")"
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-grpo-qwen-chatml-tiny}
RESUME_CHECK_DIR=checkpoints/TinyZero/$EXPERIMENT_NAME  # trainer.default_local_dir
source scripts/hw_defaults.sh
# ToolRL's project name (TinyZero) is kept; metrics and plots go to $RUN_DIR
RUN_DIR=${RUN_DIR:-outputs/TinyZero/$EXPERIMENT_NAME}
bash ./examples/grpo_trainer/run_grpo.sh trainer.run_dir="$RUN_DIR" "$@"
"$PYTHON" scripts/plot_metrics.py "$RUN_DIR/metrics.jsonl"
