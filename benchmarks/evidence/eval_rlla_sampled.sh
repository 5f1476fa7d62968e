#!/usr/bin/env bash
# RLLA validation of one model under the policy's own sampling (temperature 1, the distribution GRPO trains), several
# responses per prompt, on the prompts <= PROMPT_LENGTH tokens (the rows a p1024 run trained on). Complements the
# greedy evaluation of benchmarks/eval_tool_calling.sh; compare two models with
# benchmarks/evidence/paired_by_prompt_length.py, which averages each prompt's samples before pairing.
#
#   bash benchmarks/evidence/eval_rlla_sampled.sh smollm2-135m-sft smollm2-135m-sft      # ~17 min on 2 cores
#   bash benchmarks/evidence/eval_rlla_sampled.sh CKPT/actor/huggingface grpo_smollm2_sft_p1024_r256
# Writes outputs/eval/<NAME>/rlla_t1_n<N>.jsonl (never committed) and benchmarks/results/eval_<NAME>/rlla_t1_n<N>.json.
# Variables: N_SAMPLES (4), RESPONSE_LENGTH (256), PROMPT_LENGTH (1024), SEED (0), BATCH (8 prompts), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
MODEL=${1:?usage: eval_rlla_sampled.sh MODEL [NAME]}
NAME=${2:-$(basename "$MODEL")}
N_SAMPLES=${N_SAMPLES:-4} RESPONSE_LENGTH=${RESPONSE_LENGTH:-256} PROMPT_LENGTH=${PROMPT_LENGTH:-1024}
SEED=${SEED:-0} BATCH=${BATCH:-8}
GEN=outputs/eval/$NAME RES=benchmarks/results/eval_$NAME
mkdir -p "$GEN" "$RES"
"$PYTHON" -m verl.trainer.main_generation model.path="$MODEL" rollout.response_length="$RESPONSE_LENGTH" \
  rollout.prompt_length="$PROMPT_LENGTH" data.batch_size="$BATCH" data.n_samples="$N_SAMPLES" \
  rollout.do_sample=true rollout.temperature=1.0 rollout.seed="$SEED" data.format=rlla data.filter_overlong_prompts=true \
  data.output_path="$GEN/rlla_t1_n$N_SAMPLES.jsonl" eval.output_path="$RES/rlla_t1_n$N_SAMPLES.json" \
  > "$GEN/rlla_t1_n$N_SAMPLES.log" 2>&1 || { tail -20 "$GEN/rlla_t1_n$N_SAMPLES.log" >&2; exit 1; }
echo "summary: $RES/rlla_t1_n$N_SAMPLES.json"
