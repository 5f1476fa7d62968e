#!/usr/bin/env bash
# SFT warm start for RLVCR on an agent environment (docs/rlvcr.md): a model that answers sokoban prompts in the level format
# <level>N</level><think>...</think><action>up</action>, trained on expert play (rlvcr/env_level_sft.py: BFS-optimal
# moves, templated thinks read off the grid, prompts built by the RL rollout loop itself).
#
#   bash scripts/prepare_env_level_sft_model.sh                       # skip if the model exists
#   SFT_FORCE=1 bash scripts/prepare_env_level_sft_model.sh              # rebuild the model (the parquets are kept)
#   bash scripts/prepare_env_level_sft_model.sh trainer.total_epochs=1   # extra Hydra overrides go to the SFT trainer
#
# Variables (all optional; SFT_-prefixed so that the trainer's exported BASE_MODEL, LR, VAL_TASKS, ... never leak in;
# SFT_LR SFT_BATCH_SIZE SFT_MICRO_BATCH SFT_MAX_STEPS SFT_NPROC SFT_FORCE PYTHON as in prepare_sft_model.sh):
#   SFT_ENV          environment (default sokoban; the only one with an expert so far)
#   SFT_BASE_MODEL   start model (default tiny)
#   SFT_TARGET       output directory (default: preset_dir('tiny-sft') + '-levels-$SFT_ENV'; pass it as the RL model)
#   SFT_LEVEL_DATA   folder of the two parquets (default dataset/env_levels/, git-ignored *.parquet)
#   SFT_TRAIN_TASKS / SFT_VAL_TASKS   expert episodes (rooms) for training (default 400) / validation loss (default
#                30); sokoban 6x6 rooms average ~3.3 moves, one row per move
#   SFT_ALT_FRAC     share of expert steps that also get an alternative-think row: the prompt RLVCR samples the other
#                levels' thinks from (a level instruction ends the user turn), answered at that level (default 0.5).
#                Without them the tiny model answers that prompt with EOS at once (empty alternative thinks).
#   SFT_SEED         level draw seed (default 1); rooms: seeds 2,000,000+i (train) and 3,000,000+i (val), away from
#                the RL run's training (env.seed + i) and validation (1,000,000 + i) rooms
#   SFT_ENV_OVERRIDES  trainer overrides the prompts must share with the RL run (default: env.history_length=2
#                data.max_prompt_length=1024 data.max_response_length=128)
#   SFT_EPOCHS (default 2), SFT_MAX_LENGTH (default 1024). Threads: OMP_NUM_THREADS=1 keeps the SFT on one core.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh || exit 1
ENV=${SFT_ENV:-sokoban}
SEED=${SFT_SEED:-1}
TRAIN_TASKS=${SFT_TRAIN_TASKS:-400}
VAL_TASKS=${SFT_VAL_TASKS:-30}
ALT_FRAC=${SFT_ALT_FRAC:-0.5}
LEVEL_DATA=${SFT_LEVEL_DATA:-dataset/env_levels}
ENV_OVERRIDES=${SFT_ENV_OVERRIDES:-env.history_length=2 data.max_prompt_length=1024 data.max_response_length=128}
BASE=${SFT_BASE_MODEL:-tiny}
if [ "$ENV" != "sokoban" ]; then
  echo "prepare_env_level_sft_model.sh: no expert for SFT_ENV=$ENV (only sokoban)" >&2
  exit 2
fi
TARGET=${SFT_TARGET:-$("$PYTHON" -c "from verl.utils.model_presets import preset_dir; print(preset_dir('tiny-sft'))")-levels-$ENV}
TRAIN_FILE="$LEVEL_DATA/${ENV}_levels_train_seed${SEED}_n${TRAIN_TASKS}_alt${ALT_FRAC}.parquet"
VAL_FILE="$LEVEL_DATA/${ENV}_levels_val_seed${SEED}_n${VAL_TASKS}_alt${ALT_FRAC}.parquet"

# shellcheck disable=SC2086  # ENV_OVERRIDES is a list of key=value words
[ -f "$TRAIN_FILE" ] || "$PYTHON" -m rlvcr.env_level_sft --out "$TRAIN_FILE" --tasks "$TRAIN_TASKS" \
  --first-seed 2000000 --seed "$SEED" --split train --alt-frac "$ALT_FRAC" --tokenizer "$BASE" $ENV_OVERRIDES
# shellcheck disable=SC2086
[ -f "$VAL_FILE" ] || "$PYTHON" -m rlvcr.env_level_sft --out "$VAL_FILE" --tasks "$VAL_TASKS" \
  --first-seed 3000000 --seed "$SEED" --split test --alt-frac "$ALT_FRAC" --tokenizer "$BASE" $ENV_OVERRIDES

# SFT_DATA=<parquet path> takes verl/trainer/sft_presets.py's "path" defaults; the later data.val_files wins over its own.
SFT_DATA="$TRAIN_FILE" SFT_TARGET="$TARGET" SFT_BASE_MODEL="$BASE" SFT_EPOCHS="${SFT_EPOCHS:-2}" \
SFT_MAX_LENGTH="${SFT_MAX_LENGTH:-1024}" exec bash scripts/prepare_sft_model.sh \
  data.response_key=level_target \
  data.val_files="$VAL_FILE" \
  trainer.experiment_name="tiny-sft-levels-$ENV" \
  "$@"
