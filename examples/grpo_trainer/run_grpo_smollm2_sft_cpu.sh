#!/usr/bin/env bash
# GRPO that makes SmolLM2-135M's tool calls more correct on 2 CPU cores (experiments/notebook.md).
# Settings: verl/trainer/config/recipe/grpo_smollm2_sft_cpu.yaml (its header says what it is for, how long it takes and what to see).
# Launch variables (verl/trainer/launch.py) and key=value arguments override it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=grpo_smollm2_sft_cpu "$@"
