#!/usr/bin/env bash
# SFT warm start for RLVCR (docs/rlvcr.md): a model that answers RLLA prompts in the level format
# <level>N</level><think>...</think>\n<tool_call>/<response>, so that RLVCR rollouts parse (rlvcr/level_sft.py).
#
#   bash scripts/prepare_level_sft_model.sh                      # skip if the model exists
#   SFT_FORCE=1 bash scripts/prepare_level_sft_model.sh             # rebuild the model (the parquets are kept)
#   bash scripts/prepare_level_sft_model.sh trainer.total_training_steps=2   # extra Hydra overrides go to the trainer
#
# Variables (all optional; SFT_-prefixed so that the trainer's exported BASE_MODEL, LR, ... never leak in; the rest,
# SFT_LR SFT_BATCH_SIZE SFT_MAX_STEPS SFT_NPROC SFT_FORCE PYTHON, as in prepare_sft_model.sh):
#   SFT_BASE_MODEL  start model (default tiny). Not tiny-sft: that preset depends on how it was built (placeholder or
#               full thinks), and a level model from `tiny` is one fixed recipe, the sft_full one, with level targets.
#   SFT_TARGET  output directory (default: preset_dir('tiny-sft') + '-levels'; pass it as the RL model path)
#   SFT_LEVEL_DATA  folder of the two parquets (default: the RLLA data folder, dataset/rlla_4k/, git-ignored)
#   SFT_SEED    level draw seed (default 1); SFT_EPOCHS default 4, SFT_MICRO_BATCH 2, SFT_MAX_LENGTH 1536 (level-4
#               targets reach ~400 tokens, like sft_full)
#   SFT_MAX_TOP_SENTENCES  cap the level-4 think at this many sentences (default: whole thinks); the files and the
#               default SFT_TARGET get a `-top{K}` suffix. A 7M model does not learn to close a ~400-token think: use 5.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh || exit 1
SEED=${SFT_SEED:-1}
py() { "$PYTHON" -c "$1"; }
TOP=${SFT_MAX_TOP_SENTENCES:+-top$SFT_MAX_TOP_SENTENCES}
TARGET=${SFT_TARGET:-$(py "from verl.utils.model_presets import preset_dir; print(preset_dir('tiny-sft'))")-levels$TOP}
LEVEL_DATA=${SFT_LEVEL_DATA:-$(env -u DATA_DIR "$PYTHON" -c "from verl.utils.dataset.rlla_data import resolve_rlla_file; \
print(resolve_rlla_file('sft_full').parent)")}
TRAIN_FILE="$LEVEL_DATA/level_sft_full_seed$SEED$TOP.parquet"
VAL_FILE="$LEVEL_DATA/level_test_seed$SEED$TOP.parquet"   # the 80 validation rows in the level format (val loss)
CAP=(${SFT_MAX_TOP_SENTENCES:+--max-top-sentences "$SFT_MAX_TOP_SENTENCES"})

[ -f "$TRAIN_FILE" ] || env -u DATA_DIR "$PYTHON" -m rlvcr.level_sft --split sft_full --seed "$SEED" --out "$TRAIN_FILE" ${CAP[@]+"${CAP[@]}"}
[ -f "$VAL_FILE" ] || env -u DATA_DIR "$PYTHON" -m rlvcr.level_sft --split test --seed "$SEED" --out "$VAL_FILE" ${CAP[@]+"${CAP[@]}"}

# SFT_DATA=<parquet path> takes verl/trainer/sft_presets.py's "path" defaults; the later data.val_files wins over its own.
SFT_DATA="$TRAIN_FILE" SFT_TARGET="$TARGET" SFT_BASE_MODEL="${SFT_BASE_MODEL:-tiny}" SFT_EPOCHS="${SFT_EPOCHS:-4}" \
SFT_MAX_LENGTH="${SFT_MAX_LENGTH:-1536}" SFT_MICRO_BATCH="${SFT_MICRO_BATCH:-2}" exec bash scripts/prepare_sft_model.sh \
  data.response_key=level_target \
  data.val_files="$VAL_FILE" \
  trainer.experiment_name=tiny-sft-levels$TOP \
  "$@"
