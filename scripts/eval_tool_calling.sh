#!/usr/bin/env bash
# Greedy tool-calling evaluation of one model on the three benchmarks of ToolRL's protocol, with the project's own
# commands (main_generation + its built-in scoring): the RLLA validation split, BFCL (BFCL's checker; BFCL_ROWS rows
# per category) and API-Bank level 1 (API_BANK_ROWS rows). Writes the generations to outputs/eval/<name>/ (never
# committed) and the three summaries plus one headline file to $RESULTS/eval_<name>/ (RESULTS defaults to
# outputs/results; a study recorded in experiments/ passes its run folder).
#
#   bash scripts/eval_tool_calling.sh smollm2-135m            # before SFT
#   bash scripts/eval_tool_calling.sh smollm2-135m-sft        # after
# Variables: BFCL_ROWS (default 5), API_BANK_ROWS (default 40), RESPONSE_LENGTH (default 256), BATCH (default 8),
# PROMPT_LENGTH (default 3072; 6144 for every BFCL row), RESULTS (the summaries' folder), GENERATIONS (default
# outputs/eval), PYTHON.
#
# SAMPLED=N instead evaluates the RLLA validation split only, under the policy's own sampling: N responses per prompt
# at temperature TEMPERATURE (default 1: the distribution GRPO trains; seed SEED, default 0) on the prompts <=
# PROMPT_LENGTH tokens (default 1024 then: the rows a p1024 run trained on), written to
# outputs/eval/<name>/rlla_t<T>_n<N>.jsonl and $RESULTS/eval_<name>/rlla_t<T>_n<N>.json (~17 min for N = 4
# on 2 cores). Compare two models with experiments/scripts/paired_by_prompt_length.py, which averages each prompt's
# samples before pairing.
#   SAMPLED=4 bash scripts/eval_tool_calling.sh smollm2-135m-sft
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh || exit 1
MODEL=${1:?usage: eval_tool_calling.sh MODEL [NAME]}
NAME=${2:-$(basename "$MODEL")}
BFCL_ROWS=${BFCL_ROWS:-5} API_BANK_ROWS=${API_BANK_ROWS:-40} RESPONSE_LENGTH=${RESPONSE_LENGTH:-256}
SAMPLED=${SAMPLED:-0}
BATCH=${BATCH:-8} PROMPT_LENGTH=${PROMPT_LENGTH:-$([ "$SAMPLED" -gt 0 ] && echo 1024 || echo 3072)}
GEN=${GENERATIONS:-outputs/eval}/$NAME RES=${RESULTS:-outputs/results}/eval_$NAME
mkdir -p "$GEN" "$RES"
common=(model.path="$MODEL" rollout.response_length="$RESPONSE_LENGTH" rollout.prompt_length="$PROMPT_LENGTH"
        data.batch_size="$BATCH")
if [ "$SAMPLED" -gt 0 ]; then
  TEMPERATURE=${TEMPERATURE:-1}
  tag=rlla_t${TEMPERATURE}_n$SAMPLED
  "$PYTHON" -m verl.trainer.main_generation "${common[@]}" data.n_samples="$SAMPLED" rollout.do_sample=true \
    rollout.temperature="$TEMPERATURE" rollout.seed="${SEED:-0}" data.format=rlla data.filter_overlong_prompts=true \
    data.output_path="$GEN/$tag.jsonl" eval.output_path="$RES/$tag.json" > "$GEN/$tag.log" 2>&1 \
    || { tail -20 "$GEN/$tag.log" >&2; exit 1; }
  echo "summary: $RES/$tag.json"
  exit 0
fi
start=$(date +%s)
"$PYTHON" -m verl.trainer.main_generation "${common[@]}" data.format=rlla data.filter_overlong_prompts=true \
  data.output_path="$GEN/rlla.jsonl" eval.output_path="$RES/rlla.json" > "$GEN/rlla.log" 2>&1
"$PYTHON" -m verl.trainer.main_generation "${common[@]}" data.format=bfcl data.max_samples="$BFCL_ROWS" \
  data.output_path="$GEN/bfcl.jsonl" eval.output_path="$RES/bfcl.json" > "$GEN/bfcl.log" 2>&1
"$PYTHON" -m verl.trainer.main_generation "${common[@]}" data.format=api_bank data.max_samples="$API_BANK_ROWS" \
  data.output_path="$GEN/api_bank.jsonl" eval.output_path="$RES/api_bank.json" > "$GEN/api_bank.log" 2>&1
"$PYTHON" - "$RES" "$MODEL" "$(( $(date +%s) - start ))" <<'PY'
import json, sys
from pathlib import Path
res, model, seconds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
load = lambda name: json.loads((res / f"{name}.json").read_text())
rlla, bfcl, api = load("rlla"), load("bfcl"), load("api_bank")
keep = ("calls_per_prompt", "tool_use_rate", "decision_f1", "tool_productivity")
headline = {
    "model": model, "wall_s": seconds,
    "rlla": {"rows": rlla["rows"], **{k: rlla["rlla_reward"][k] for k in ("score", "format", "correctness")},
             "exact_match": rlla["exact_match"], "name_match": rlla["name_match"],
             "no_tool_call_rate": rlla["no_tool_call_rate"], **{k: rlla["tool_cost"][k] for k in keep}},
    "bfcl": {"rows": bfcl["rows"], **bfcl["bfcl"], "categories": {k: v["accuracy"] for k, v in bfcl["categories"].items()},
             **{k: bfcl["tool_cost"][k] for k in keep}},
    "api_bank_level1": {"rows": api["rows"], "exact_match": api["exact_match"], "name_match": api["name_match"],
                        **{k: api["tool_cost"][k] for k in keep}},
}
(res / "headline.json").write_text(json.dumps(headline, indent=2) + "\n")
print(json.dumps(headline, indent=2))
PY
