#!/usr/bin/env bash
# Issue 23 §2 evidence: the async mode with replay.max_age 1 vs 4, without and with the learner's rollout correction
# (token-level truncated IS, C = 2), tiny-sft model (MODEL; the untrained tiny model gets the same floor reward on every
# sample, so RLOO's advantages and the updates are all 0), RLOO, 4 prompts x 4 x 32 tokens, 10 measured steps each:
# rollouts trained per second, the IS metrics, the clip fraction and the reward of the arriving rollouts.
# LR (default 3e-3) is the learner's: large enough that one version makes the policy measurably stale.
# Writes experiments/runs/async-01/tiny.json (OUT). ~8 min on 2 cores. With a model whose rewards vary
# (MODEL=smollm2-135m-sft) the responses need room: MAX_NEW_TOKENS=128 (at 32 every RLLA response is cut and scores
# the same), LR=1e-4; measured start: ~2 min a learner step on 2 busy cores, so ~90 min for the four runs
# (STEPS=6 measured steps instead of 10: ~60 min).
# VALIDATE=1 adds greedy validation (docs/async.md "Validation") on the RLLA validation rows that fit 1,024 prompt
# tokens, MAX_NEW_TOKENS per response: at version 0 once (the first run; every run starts from the same weights) and
# after each run's last step, every response kept (trainer.validation_data_dir, under outputs/evidence/async_correction/
# VAL_NAME, not committed), so the result also holds each run's validation reward, its paired gain over version 0 and
# the paired differences between runs (async_validation_summary.py). SYNC=1 (with VALIDATE=1) adds the synchronous
# trainer at the same settings (bench_async_vs_sync.py --only sync), the on-policy reference. Issue 23's longer run:
#   MODEL=smollm2-135m-sft MAX_NEW_TOKENS=128 LR=1e-4 STEPS=12 VALIDATE=1 SYNC=1 \
#     OUT=experiments/runs/async-01/val_smollm2_sft.json bash experiments/scripts/async_correction.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
OUT=${OUT:-experiments/runs/async-01/tiny.json}
TMP=$(mktemp -d)
VAL=outputs/evidence/async_correction/${VAL_NAME:-$(basename "$OUT" .json)}
first=1
for age in 1 4; do
  for corr in none token; do
    extra=()
    [ "$corr" = token ] && extra=(--rollout-is token --rollout-is-threshold 2.0)
    if [ "${VALIDATE:-0}" = 1 ]; then
      extra+=(--validate --val-dump "$VAL/age${age}_${corr}")
      [ $first = 1 ] && extra+=(--val-before-train)
      first=0
    fi
    # the bench settings these results were measured with (its defaults before issue 24's tuning); the orchestrator's
    # scheduling changed since (next step before the broadcast, in-flight rollouts counted), so a rerun is close to,
    # not the same as, the committed runs
    "$PYTHON" benchmarks/bench_async_vs_sync.py --only async --max-age "$age" --steps "${STEPS:-10}" --lr "${LR:-3e-3}" \
      --model "${MODEL:-tiny-sft}" --max-new-tokens "${MAX_NEW_TOKENS:-32}" \
      --replicas 1 --order newest_first --learner-threads 0 --batch-by tokens \
      "${extra[@]}" \
      --json "$TMP/age${age}_${corr}.json" > "$TMP/age${age}_${corr}.log" 2>&1
  done
done
if [ "${VALIDATE:-0}" = 1 ] && [ "${SYNC:-0}" = 1 ]; then
  "$PYTHON" benchmarks/bench_async_vs_sync.py --only sync --steps "${STEPS:-10}" --lr "${LR:-3e-3}" \
    --model "${MODEL:-tiny-sft}" --max-new-tokens "${MAX_NEW_TOKENS:-32}" --validate --val-dump "$VAL/sync" \
    --json "$TMP/sync.json" > "$TMP/sync.log" 2>&1
fi
"$PYTHON" - "$TMP" "$OUT" <<'PY'
import json, os, sys
from pathlib import Path
tmp, out = Path(sys.argv[1]), Path(sys.argv[2])
keep = ("rollouts_trained_per_s", "rollouts_generated_per_s", "learner_step_s_median", "frac_on_policy",
        "stale_dropped", "used_version_lag", "reward_mean", "reward_mean_last_half", "rollout_corr/kl_mean",
        "rollout_corr/is_weight_mean_mean", "rollout_corr/is_weight_max_mean", "actor/pg_clipfrac_mean")
runs = {}
for path in sorted(tmp.glob("age*.json")):
    summary = next(r for r in json.loads(path.read_text()) if r["mode"] == "async")
    runs[path.stem] = {k: summary.get(k) for k in keep}
    if summary.get("validation"):
        runs[path.stem]["validation"] = summary["validation"]
if (tmp / "sync.json").is_file():
    summary = json.loads((tmp / "sync.json").read_text())[0]
    runs["sync"] = {k: summary.get(k) for k in ("rollouts_trained_per_s", "step_s_median", "validation")}
env = " ".join(f"{k}={os.environ[k]}" for k in ("MODEL", "MAX_NEW_TOKENS", "LR", "STEPS", "VALIDATE", "SYNC") if k in os.environ)
result = {"command": (env + " " if env else "") + f"OUT={out} bash experiments/scripts/async_correction.sh",
          "settings": "model " + os.environ.get("MODEL", "tiny-sft") + ", RLOO, 4 prompts x 4 samples "
                      "x " + os.environ.get("MAX_NEW_TOKENS", "32") + " tokens per learner step, "
                      + os.environ.get("STEPS", "10") + " measured steps, learner lr "
                      + os.environ.get("LR", "3e-3"),
          "runs": runs}
out.write_text(json.dumps(result, indent=2, default=str) + "\n")
print(json.dumps(result, indent=2, default=str))
PY
if [ "${VALIDATE:-0}" = 1 ]; then
  runs=()
  for d in "$VAL"/*/; do runs+=(--run "$(basename "$d")=$d"); done
  "$PYTHON" experiments/scripts/async_validation_summary.py --result "$OUT" "${runs[@]}" \
    --pair age1_none,age1_token --pair age4_none,age4_token --pair age1_none,age4_none --pair age1_token,age4_token \
    --pair sync,age1_none --pair sync,age1_token --pair sync,age4_none --pair sync,age4_token > /dev/null
fi
rm -rf "$TMP"
