#!/usr/bin/env bash
# Build the `tiny-sft` model preset: SFT warm start of the `tiny` preset on RLLA rows, so that RL starts from a
# policy that already writes <think>...</think> + <tool_call>/<response> (a random-init model never would).
#
#   bash scripts/prepare_sft_model.sh                 # skip if the preset exists
#   FORCE=1 bash scripts/prepare_sft_model.sh         # rebuild
#   SFT_DATA=sft_full bash scripts/prepare_sft_model.sh   # train on the full-reasoning rows instead
#   bash scripts/prepare_sft_model.sh trainer.total_epochs=1   # extra Hydra overrides go to the trainer
#
# Variables (all optional):
#   SFT_DATA   train (default: RL-style rows, placeholder think, ~70-token targets) | sft_full (full reasoning,
#              ~400-token targets) | a parquet path
#   BASE_MODEL preset or HF directory to start from (default tiny)
#   TARGET     output directory (default: preset_dir('tiny-sft'), where prepare_model('tiny-sft') looks)
#   EPOCHS, LR, MAX_LENGTH, BATCH_SIZE, MICRO_BATCH   training knobs (defaults per SFT_DATA below)
#   NPROC      >1 launches torchrun with that many processes (FSDP2); default 1 (plain single process)
#   FORCE=1    rebuild even if TARGET exists;  PYTHON   interpreter (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
SFT_DATA=${SFT_DATA:-train}
BASE_MODEL=${BASE_MODEL:-tiny}
NPROC=${NPROC:-1}
TARGET=${TARGET:-$($PYTHON -c "from verl.utils.model_presets import preset_dir; print(preset_dir('tiny-sft'))")}

if [ -f "$TARGET/config.json" ] && [ "${FORCE:-0}" != "1" ]; then
  echo "SFT model already at $TARGET (FORCE=1 to rebuild)"
  exit 0
fi

rlla_file() { $PYTHON -c "from verl.utils.dataset.rlla_data import resolve_rlla_file; print(resolve_rlla_file('$1'))"; }
case "$SFT_DATA" in
  train)
    # Short targets: the loss is on ~70 tokens per row, the cost is the prompt. 1024 tokens keeps ~80% of the prompts
    # whole (longer ones lose the start of their tool list, which the model needs to copy tool names); a random-init
    # 7M model needs a high LR and many small steps (8-row batches: 49 steps per epoch).
    : "${EPOCHS:=5}" "${LR:=3e-3}" "${MAX_LENGTH:=1024}" "${BATCH_SIZE:=8}" "${MICRO_BATCH:=4}"
    TRAIN_FILE=$(rlla_file train) ;;
  sft_full)
    : "${EPOCHS:=4}" "${LR:=3e-3}" "${MAX_LENGTH:=1536}" "${BATCH_SIZE:=8}" "${MICRO_BATCH:=2}"
    TRAIN_FILE=$(rlla_file sft_full) ;;
  *)
    : "${EPOCHS:=5}" "${LR:=3e-3}" "${MAX_LENGTH:=1024}" "${BATCH_SIZE:=8}" "${MICRO_BATCH:=4}"
    TRAIN_FILE=$SFT_DATA ;;
esac
VAL_FILE=$(rlla_file test)

if [ "$NPROC" -gt 1 ]; then
  LAUNCH=(torchrun --standalone --nproc_per_node="$NPROC" -m verl.trainer.fsdp_sft_trainer)
else
  LAUNCH=("$PYTHON" -m verl.trainer.fsdp_sft_trainer)
fi

echo "SFT of $BASE_MODEL on $TRAIN_FILE -> $TARGET (epochs=$EPOCHS lr=$LR max_length=$MAX_LENGTH)"
"${LAUNCH[@]}" \
  data.train_files="$TRAIN_FILE" \
  data.val_files="$VAL_FILE" \
  data.max_length="$MAX_LENGTH" \
  data.truncation=left \
  data.train_batch_size="$BATCH_SIZE" \
  data.micro_batch_size_per_gpu="$MICRO_BATCH" \
  model.partial_pretrain="$BASE_MODEL" \
  optim.lr="$LR" \
  optim.warmup_steps_ratio=0.05 \
  optim.lr_scheduler=cosine \
  trainer.total_epochs="$EPOCHS" \
  trainer.default_local_dir="$TARGET" \
  trainer.overwrite=true \
  trainer.experiment_name="tiny-sft-$SFT_DATA" \
  "$@"
# the loss curve (train and validation) next to the model
"$PYTHON" scripts/plot_metrics.py "$TARGET/metrics.jsonl" --out "$TARGET/plots" || echo "plotting failed (the model is fine)" >&2
