#!/usr/bin/env bash
# Evaluate one GRPO checkpoint against the starting model the way every issue-19 checkpoint was judged: the policy's
# own sampling on the RLLA validation prompts <= 1,024 tokens, then the per-prompt paired comparison with the start
# (ToolRL's default reward, and again with the refined reward the runs train on) and the split of the calls by count
# against the ground truth. ~17 min for 4 samples on 2 cores.
#
#   bash experiments/scripts/eval_checkpoint.sh CHECKPOINT_HF_DIR NAME
#   bash experiments/scripts/eval_checkpoint.sh \
#     checkpoints/TinyZero/grpo_smollm2_sft_p1024_r256_b16_mb4_lr1e-5_t0.5_refined_klloss/global_step_20/actor/huggingface \
#     grpo_smollm2_sft_p1024_r256_b16_mb4_lr1e-5_t0.5_refined_klloss_step20
#
# Writes $RESULTS/{eval_NAME/, NAME_sampled_tT_paired.json, NAME_sampled_tT_paired_refinedreward.json,
# NAME_calls_vs_ground_truth.json} and the generations to outputs/eval/<RESULTS' folder name>/NAME/ (never committed).
# Variables: START (the starting model's eval name, default smollm2-135m-sft), SAMPLED (default 4), TEMPERATURE
# (default 0.5), PROMPT_LENGTH (default 1024). The start's sampled generations are made first when missing
# (SAMPLED=... bash scripts/eval_tool_calling.sh START, another ~15 min), with the same settings.
# BFCL_ROWS=N also judges it on BFCL's field protocol: both models greedy at 256 tokens on the first N rows of each
# single-turn category (plus RLLA greedy and API-Bank level 1: scripts/eval_tool_calling.sh into
# outputs/eval/{START,NAME}_bfclN/, ~11 min a model, the start's made once), then BFCL accuracy paired per row by
# BFCL's own verdicts (main_eval --baseline) into $RESULTS/NAME_bfclN_paired.json. RESULTS: the run's folder under
# experiments/runs/ when the result is recorded (default outputs/results).
set -euo pipefail
cd "$(dirname "$0")/../.."
CKPT=${1:?usage: eval_checkpoint.sh CHECKPOINT_HF_DIR NAME}
NAME=${2:?usage: eval_checkpoint.sh CHECKPOINT_HF_DIR NAME}
[ -f "$CKPT/config.json" ] || { echo "eval_checkpoint.sh: $CKPT has no config.json (expected a checkpoint's actor/huggingface directory)" >&2; exit 1; }
# the arguments are checked first: on a bare machine ensure_env.sh sets up .venv (minutes) before anything else
source scripts/ensure_env.sh || exit 1
START=${START:-smollm2-135m-sft}
export SAMPLED=${SAMPLED:-4} TEMPERATURE=${TEMPERATURE:-0.5} PROMPT_LENGTH=${PROMPT_LENGTH:-1024}
tag=rlla_t${TEMPERATURE}_n$SAMPLED
R=${RESULTS:-outputs/results} G=outputs/eval/$(basename "${RESULTS:-outputs/results}")  # the checkpoint's generations
BEFORE=outputs/eval/$START/$tag.jsonl AFTER=$G/$NAME/$tag.jsonl
if [ ! -f "$BEFORE" ]; then
  echo "eval_checkpoint.sh: $BEFORE missing; generating the start's samples first"
  RESULTS=outputs/results bash scripts/eval_tool_calling.sh "$START"
fi
RESULTS=$R GENERATIONS=$G bash scripts/eval_tool_calling.sh "$CKPT" "$NAME"
paired=(experiments/scripts/paired_by_prompt_length.py "$BEFORE" "$AFTER" --tokenizer "$CKPT"
        --max-prompt-tokens "$PROMPT_LENGTH")
"$PYTHON" "${paired[@]}" --output "$R/${NAME}_sampled_t${TEMPERATURE}_paired.json"
REFINEDREWARD=1 "$PYTHON" "${paired[@]}" --output "$R/${NAME}_sampled_t${TEMPERATURE}_paired_refinedreward.json"
"$PYTHON" experiments/scripts/calls_vs_ground_truth.py "$BEFORE" "$AFTER" --output "$R/${NAME}_calls_vs_ground_truth.json"
if [ -n "${BFCL_ROWS:-}" ]; then
  greedy() { [ -s "$3/$2/bfcl.jsonl" ] || env -u SAMPLED -u TEMPERATURE -u PROMPT_LENGTH RESULTS="$4" GENERATIONS="$3" \
    bash scripts/eval_tool_calling.sh "$1" "$2"; }  # MODEL NAME GENERATIONS RESULTS, made once
  greedy "$START" "${START}_bfcl$BFCL_ROWS" outputs/eval outputs/results
  greedy "$CKPT" "${NAME}_bfcl$BFCL_ROWS" "$G" "$R"
  "$PYTHON" -m verl.trainer.main_eval --generations "$G/${NAME}_bfcl$BFCL_ROWS/bfcl.jsonl" \
    --baseline "outputs/eval/${START}_bfcl$BFCL_ROWS/bfcl.jsonl" --output "$R/${NAME}_bfcl${BFCL_ROWS}_paired.json"
fi
