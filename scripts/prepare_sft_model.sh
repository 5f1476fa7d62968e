#!/usr/bin/env bash
# Build an SFT model preset: `tiny-sft` (default: the `tiny` preset after SFT on RLLA rows, so that RL starts from a
# policy that already writes <think>...</think> + <tool_call>/<response>; a random-init model never would) or
# `smollm2-135m-sft` (SmolLM2-135M-Instruct after the same SFT with its own recipe).
#
#   bash scripts/prepare_sft_model.sh                 # skip if the preset exists
#   SFT_PRESET=smollm2-135m-sft bash scripts/prepare_sft_model.sh   # the real model (~40 min on 2 CPU cores)
#   SFT_FORCE=1 bash scripts/prepare_sft_model.sh     # rebuild
#   SFT_DATA=sft_full bash scripts/prepare_sft_model.sh   # train on the full-reasoning rows instead
#   bash scripts/prepare_sft_model.sh trainer.total_epochs=1   # extra Hydra overrides go to the trainer
#
# Variables (all optional). Every name starts with SFT_: the training launch scripts export BASE_MODEL, LR, ... for
# the RL trainer and call this script on first use, and those must never become the SFT's settings.
#   SFT_PRESET      tiny-sft (default) | smollm2-135m-sft: which preset to build; it sets the base model, the target
#                   and the recipe's defaults (tiny-sft: base tiny, lr 3e-3, 5 epochs, batch 8 x micro 4;
#                   smollm2-135m-sft: base smollm2-135m, lr 1e-4, 1 epoch, batch 8 x micro 2)
#   SFT_DATA        train (default: RL-style rows, placeholder think, ~70-token targets) | sft_full (full reasoning,
#                   ~400-token targets) | a parquet path
#   SFT_DATA_DIR    folder of the RLLA files (default: the trainer's data search, without $DATA_DIR)
#   SFT_BASE_MODEL  preset or HF directory to start from (default: the SFT_PRESET's base)
#   SFT_TARGET      output directory (default: preset_dir(SFT_PRESET), where prepare_model(SFT_PRESET) looks)
#   SFT_EPOCHS, SFT_LR, SFT_MAX_LENGTH, SFT_BATCH_SIZE, SFT_MICRO_BATCH   training knobs (defaults per SFT_DATA below)
#   SFT_MAX_STEPS   stop after this many optimizer steps (default: all epochs)
#   SFT_NPROC       >1 launches torchrun with that many processes (FSDP2); default 1 (plain single process)
#   SFT_FORCE=1     rebuild even if SFT_TARGET exists;  PYTHON   interpreter (default: scripts/ensure_env.sh's choice)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh || exit 1
SFT_PRESET=${SFT_PRESET:-tiny-sft}
case "$SFT_PRESET" in
  tiny-sft) : "${SFT_BASE_MODEL:=tiny}" ;;
  smollm2-135m-sft)
    # a pretrained 135M instruct model: a small lr, one epoch (49 steps of 8 rows, ~47 s each on 2 CPU cores)
    : "${SFT_BASE_MODEL:=smollm2-135m}" "${SFT_LR:=1e-4}" "${SFT_EPOCHS:=1}" "${SFT_MICRO_BATCH:=2}" ;;
  *) echo "prepare_sft_model.sh: SFT_PRESET=$SFT_PRESET; expected tiny-sft or smollm2-135m-sft" >&2; exit 2 ;;
esac
SFT_DATA=${SFT_DATA:-train}
SFT_NPROC=${SFT_NPROC:-1}
SFT_TARGET=${SFT_TARGET:-$("$PYTHON" -c "from verl.utils.model_presets import preset_dir; print(preset_dir('$SFT_PRESET'))")}

if [ -f "$SFT_TARGET/config.json" ] && [ "${SFT_FORCE:-0}" != "1" ]; then
  echo "SFT model already at $SFT_TARGET (SFT_FORCE=1 to rebuild)"
  exit 0
fi

# the RLLA files: SFT_DATA_DIR when set, else the default search (never the trainer's exported DATA_DIR: the preset
# is one cache shared by every run)
rlla_file() { env -u DATA_DIR "$PYTHON" -c "import sys; from verl.utils.dataset.rlla_data import resolve_rlla_file; \
print(resolve_rlla_file(sys.argv[1], sys.argv[2] or None))" "$1" "${SFT_DATA_DIR:-}"; }
case "$SFT_DATA" in
  train)
    # Short targets: the loss is on ~70 tokens per row, the cost is the prompt. 1024 tokens keeps ~80% of the prompts
    # whole (longer ones lose the start of their tool list, which the model needs to copy tool names); a random-init
    # 7M model needs a high LR and many small steps (8-row batches: 49 steps per epoch).
    : "${SFT_EPOCHS:=5}" "${SFT_LR:=3e-3}" "${SFT_MAX_LENGTH:=1024}" "${SFT_BATCH_SIZE:=8}" "${SFT_MICRO_BATCH:=4}"
    TRAIN_FILE=$(rlla_file train) ;;
  sft_full)
    : "${SFT_EPOCHS:=4}" "${SFT_LR:=3e-3}" "${SFT_MAX_LENGTH:=1536}" "${SFT_BATCH_SIZE:=8}" "${SFT_MICRO_BATCH:=2}"
    TRAIN_FILE=$(rlla_file sft_full) ;;
  *)
    : "${SFT_EPOCHS:=5}" "${SFT_LR:=3e-3}" "${SFT_MAX_LENGTH:=1024}" "${SFT_BATCH_SIZE:=8}" "${SFT_MICRO_BATCH:=4}"
    TRAIN_FILE=$SFT_DATA ;;
esac
VAL_FILE=$(rlla_file test)

if [ "$SFT_NPROC" -gt 1 ]; then
  LAUNCH=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$SFT_NPROC" -m verl.trainer.fsdp_sft_trainer)
else
  LAUNCH=("$PYTHON" -m verl.trainer.fsdp_sft_trainer)
fi

STEPS=()
[ -n "${SFT_MAX_STEPS:-}" ] && STEPS=(trainer.total_training_steps="$SFT_MAX_STEPS")
echo "SFT of $SFT_BASE_MODEL on $TRAIN_FILE -> $SFT_TARGET (epochs=$SFT_EPOCHS lr=$SFT_LR \
max_length=$SFT_MAX_LENGTH${SFT_MAX_STEPS:+ max_steps=$SFT_MAX_STEPS})"
"${LAUNCH[@]}" \
  data.train_files="$TRAIN_FILE" \
  data.val_files="$VAL_FILE" \
  data.max_length="$SFT_MAX_LENGTH" \
  data.truncation=left \
  data.train_batch_size="$SFT_BATCH_SIZE" \
  data.micro_batch_size_per_gpu="$SFT_MICRO_BATCH" \
  model.partial_pretrain="$SFT_BASE_MODEL" \
  optim.lr="$SFT_LR" \
  optim.warmup_steps_ratio=0.05 \
  optim.lr_scheduler=cosine \
  trainer.total_epochs="$SFT_EPOCHS" \
  trainer.default_local_dir="$SFT_TARGET" \
  trainer.overwrite=true \
  trainer.experiment_name="$SFT_PRESET-$SFT_DATA" \
  ${STEPS[@]+"${STEPS[@]}"} \
  "$@"
# the loss curve (train and validation) next to the model
"$PYTHON" scripts/plot_metrics.py "$SFT_TARGET/metrics.jsonl" --out "$SFT_TARGET/plots" || echo "plotting failed (the model is fine)" >&2
