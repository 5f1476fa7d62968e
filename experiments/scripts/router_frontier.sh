#!/usr/bin/env bash
# Issue 19 §3.4: the learned router and the fixed routing policies (never-tools `answer`, always-tools `search`, random
# tool routes at the budget's rate) on the same trained actor and the same prompts — the validation prompts that fit
# the run's max_prompt_length, greedy, 128 new tokens as the run's validation — then the cost–accuracy points, their
# paired gains against random routing, and the plot. The learned head is scored twice: greedy (its argmax route per
# prompt) and as the stochastic policy it is trained as, exactly in expectation over its routes from the three fixed
# routes' greedy generations (`learned_expected`, paired against random routing at rate B in expectation).
#   bash experiments/scripts/router_frontier.sh CHECKPOINT NAME [BUDGET_B]
#   e.g. bash experiments/scripts/router_frontier.sh \
#          checkpoints/router_grpo/router_forbid_smollm2_sft_b0.3/global_step_30 router_forbid_b0.3_step30 0.3
#   LAMBDAS="0 1 2 3 4 5" bash experiments/scripts/router_frontier.sh CKPT NAME B   # + a value head's λ sweep
#   BENCHMARK=bfcl BFCL_ROWS=12 bash experiments/scripts/router_frontier.sh CKPT NAME B   # on BFCL instead: the
#   first BFCL_ROWS rows of each single-turn category (verl.utils.dataset.bfcl), scored by BFCL's checker; only the
#   three fixed routes are generated and the head is scored in expectation from the router_probs they record;
#   BFCL_SKIP=12 leaves out each category's first 12 rows first (a sample disjoint from BFCL_ROWS=12's)
#   CALIBRATE=1 (a router.loss_mode=value checkpoint): also the head re-priced so that its mean route cost over the
#   prompts is B, from the prompts alone (no label); CALIBRATE_ON=FILE sets that price on another router-infer output
#   of the same checkpoint instead (e.g. another sample's answer.jsonl; a relative path is from the repository root)
#   ROUTES_FROM=DIR ROUTES_CKPT=CKPT0: DIR is the folder (outputs/eval/NAME0) of an earlier run of this script on
#   checkpoint CKPT0 whose actor has the same weights as CKPT's (a router trained on the same fixed actor; checked:
#   their actor/huggingface/model.safetensors must be byte for byte equal, else it stops): the fixed routes'
#   generations (and BFCL prompts) of DIR are reused, not generated again, and CKPT's head is scored in expectation
#   from its routing probabilities alone (one router forward per prompt, --max_new_tokens 1, into head.jsonl); the
#   head's own greedy generations (the 'learned' point) are not made
# Niced; a policy whose generations exist is not generated again. Generations: outputs/eval/<RESULTS' folder name>/NAME/
# (not committed);
# results: $RESULTS/NAME_frontier.{json,png} (RESULTS: the run's folder under experiments/runs/ when the result
# is recorded; default outputs/results).
set -euo pipefail
cd "$(dirname "$0")/../.."
CKPT=$1
NAME=$2
B=${3:-0.3}
PYTHON=${PYTHON:-.venv/bin/python}
BENCHMARK=${BENCHMARK:-rlla}
GIVEN_PROMPTS=${PROMPTS:-}  # recorded in the result's command as given
RESULTS=${RESULTS:-outputs/results}
OUT=outputs/eval/$(basename "$RESULTS")/$NAME  # per results folder: short NAMEs of two runs never share generations
mkdir -p "$OUT" "$RESULTS"
policies=()
case $BENCHMARK in
  rlla) PROMPTS=${PROMPTS:-${DATA_DIR:-dataset/rlla_4k}/test_router.parquet}
        fixed=("random:$B" learned answer search calculate) reference=random_$B ;;
  bfcl) [ -z "${PROMPTS:-}" ] || { echo "router_frontier.sh: PROMPTS with BENCHMARK=bfcl: the BFCL prompts come" \
          "from bfcl-eval (choose how many per category with BFCL_ROWS)" >&2; exit 2; }
        rows=${BFCL_ROWS:-12} skip=${BFCL_SKIP:-0} PROMPTS=$OUT/bfcl_prompts.parquet
        if [ -n "${ROUTES_FROM:-}" ]; then  # the prompts its generations answer
          if [ ! -s "$PROMPTS" ]; then
            cp "$ROUTES_FROM/bfcl_prompts.parquet" "$PROMPTS" || exit 2
            cp "$ROUTES_FROM/bfcl_rows" "$OUT/bfcl_rows" || exit 2
          elif ! cmp -s "$PROMPTS" "$ROUTES_FROM/bfcl_prompts.parquet"; then
            echo "router_frontier.sh: $PROMPTS differs from $ROUTES_FROM/bfcl_prompts.parquet: use another NAME" >&2
            exit 2
          fi
        fi
        # a folder made before BFCL_SKIP existed holds "ROWS" alone: the same as "ROWS skip 0"
        made=$(cat "$OUT/bfcl_rows" 2>/dev/null || true); [ -z "$made" ] || [ "${made#* }" != "$made" ] || made="$made skip 0"
        if [ -n "$made" ] && [ "$made" != "$rows skip $skip" ]; then  # its generations are of those rows
          echo "router_frontier.sh: $OUT holds BFCL_ROWS BFCL_SKIP = $made, not $rows skip $skip: use another NAME" >&2
          exit 2
        fi
        [ -s "$PROMPTS" ] || "$PYTHON" -c 'import sys; from verl.utils.dataset.bfcl import write_bfcl_parquet
write_bfcl_parquet(sys.argv[1], None, int(sys.argv[2]), int(sys.argv[3]))' "$PROMPTS" "$rows" "$skip"
        echo "$rows skip $skip" > "$OUT/bfcl_rows"
        fixed=(answer search calculate) reference=answer
        policies=(--policy "learned=$OUT/answer.jsonl") ;;  # the head's router_probs, recorded under every route
  *) echo "router_frontier.sh: BENCHMARK=$BENCHMARK: expected rlla or bfcl" >&2; exit 2 ;;
esac
if [ -n "${ROUTES_FROM:-}" ]; then
  [ -n "${ROUTES_CKPT:-}" ] || { echo "router_frontier.sh: ROUTES_FROM needs ROUTES_CKPT, the checkpoint that made" \
    "its generations" >&2; exit 2; }
  actor_weights() { "$PYTHON" -c 'import sys; from verl.router.checkpoint import resolve_checkpoint
print(resolve_checkpoint(sys.argv[1]).hf_dir / "model.safetensors")' "$1"; }
  weights=$(actor_weights "$CKPT")
  weights_then=$(actor_weights "$ROUTES_CKPT")
  if ! cmp -s "$weights" "$weights_then"; then
    echo "router_frontier.sh: the actor weights of $CKPT and ROUTES_CKPT=$ROUTES_CKPT differ: the generations" \
      "in $ROUTES_FROM are not this actor's; generate them again (leave ROUTES_FROM unset)" >&2
    exit 2
  fi
  kept=()
  for routes in "${fixed[@]}"; do
    [ "$routes" = learned ] && continue
    tag=${routes/:/_}
    [ -s "$ROUTES_FROM/$tag.jsonl" ] || { echo "router_frontier.sh: $ROUTES_FROM/$tag.jsonl is missing" >&2; exit 2; }
    [ -s "$OUT/$tag.jsonl" ] || cp "$ROUTES_FROM/$tag.jsonl" "$OUT/$tag.jsonl"
    kept+=("$routes")
  done
  fixed=("${kept[@]}")
  [ -s "$OUT/head.jsonl" ] || nice -n 19 "$PYTHON" -m verl.router.infer --checkpoint "$CKPT" --prompts "$PROMPTS" \
    --output "$OUT/head.jsonl" --routes learned --max_new_tokens 1 --filter_overlong_prompts
  policies=(--policy "learned=$OUT/head.jsonl")
fi
points=()
for routes in "${fixed[@]}"; do
  tag=${routes/:/_}
  if [ ! -s "$OUT/$tag.jsonl" ]; then
    nice -n 19 "$PYTHON" -m verl.router.infer --checkpoint "$CKPT" --prompts "$PROMPTS" --output "$OUT/$tag.jsonl" \
      --routes "$routes" --max_new_tokens "${MAX_NEW_TOKENS:-128}" --filter_overlong_prompts
  fi
  points+=("$tag=$OUT/$tag.jsonl")
done
# LAMBDAS="1 2 3 ..." (a router.loss_mode=value checkpoint): the same head at each fixed price (--fixed_lambda), only
# its routing probabilities (one new token), scored in expectation: the head's own cost–reward curve, and the
# fixed-penalty policies of the ablation
for lam in ${LAMBDAS:-}; do
  if [ ! -s "$OUT/lambda_$lam.jsonl" ]; then
    nice -n 19 "$PYTHON" -m verl.router.infer --checkpoint "$CKPT" --prompts "$PROMPTS" --output "$OUT/lambda_$lam.jsonl" \
      --routes learned --fixed_lambda "$lam" --max_new_tokens 1 --filter_overlong_prompts
  fi
  policies+=(--policy "lambda_$lam=$OUT/lambda_$lam.jsonl")
done
calibrate=()
case ${CALIBRATE:-0} in 0|1) ;; *) echo "router_frontier.sh: CALIBRATE=$CALIBRATE: expected 0 or 1" >&2; exit 2 ;; esac
if [ "${CALIBRATE:-0}" = 1 ] || [ -n "${CALIBRATE_ON:-}" ]; then
  calibrate=(--calibrate "$CKPT")
  [ -z "${CALIBRATE_ON:-}" ] || calibrate+=(--calibrate_on "$CALIBRATE_ON")
fi
"$PYTHON" experiments/scripts/router_frontier.py "${points[@]}" "${policies[@]}" --budget "$B" --reference "$reference" \
  --expected learned --benchmark "$BENCHMARK" "${calibrate[@]}" \
  --output "$RESULTS/${NAME}_frontier.json" --plot "$RESULTS/${NAME}_frontier.png" \
  --title "$NAME: routing policies on the actor of $(basename "$CKPT")" \
  --command "RESULTS=$RESULTS ${ROUTES_FROM:+ROUTES_FROM=$ROUTES_FROM ROUTES_CKPT=$ROUTES_CKPT }${LAMBDAS:+LAMBDAS=\"$LAMBDAS\" }${BFCL_ROWS:+BFCL_ROWS=$BFCL_ROWS }${BFCL_SKIP:+BFCL_SKIP=$BFCL_SKIP }${CALIBRATE:+CALIBRATE=$CALIBRATE }\
${CALIBRATE_ON:+CALIBRATE_ON=$CALIBRATE_ON }${GIVEN_PROMPTS:+PROMPTS=$GIVEN_PROMPTS }${DATA_DIR:+DATA_DIR=$DATA_DIR }\
${MAX_NEW_TOKENS:+MAX_NEW_TOKENS=$MAX_NEW_TOKENS }BENCHMARK=$BENCHMARK bash \
experiments/scripts/router_frontier.sh $CKPT $NAME $B"
