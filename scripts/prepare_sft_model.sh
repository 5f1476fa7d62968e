#!/usr/bin/env bash
# Build an SFT model preset (tiny-sft by default, SFT_PRESET=smollm2-135m-sft for the real model): the SFT warm start
# on RLLA rows. The recipe and its SFT_* variables are in verl/trainer/sft_presets.py (its docstring lists them); the
# trainer builds a preset itself on first use (trainer.build_sft_preset, set by every recipe).
#   bash scripts/prepare_sft_model.sh                         # skip if the preset exists (SFT_FORCE=1 rebuilds)
#   SFT_PRESET=smollm2-135m-sft bash scripts/prepare_sft_model.sh   # ~40 min on 2 CPU cores
#   bash scripts/prepare_sft_model.sh trainer.total_epochs=1  # key=value arguments go to the SFT trainer
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.sft_presets "$@"
