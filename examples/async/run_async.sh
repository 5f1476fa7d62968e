#!/usr/bin/env bash
# Asynchronous RL on CPU with the tiny model (docs/async.md).
# Settings: verl/trainer/config/recipe/async_tiny.yaml (its header says what it is for, how long it takes and what to see).
# Launch variables (verl/trainer/launch.py) and key=value arguments override it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_async recipe=async_tiny "$@"
