#!/usr/bin/env bash
# Issue 23 §2 evidence: the async mode with replay.max_age 1 vs 4, without and with the learner's rollout correction
# (token-level truncated IS, C = 2), tiny-sft model (MODEL; the untrained tiny model gets the same floor reward on every
# sample, so RLOO's advantages and the updates are all 0), RLOO, 4 prompts x 4 x 32 tokens, 10 measured steps each:
# rollouts trained per second, the IS metrics, the clip fraction and the reward of the arriving rollouts.
# LR (default 3e-3) is the learner's: large enough that one version makes the policy measurably stale.
# Writes benchmarks/results/async_correction.json (OUT). ~8 min on 2 cores. With a model whose rewards vary
# (MODEL=smollm2-135m-sft) the responses need room: MAX_NEW_TOKENS=128 (at 32 every RLLA response is cut and scores
# the same), LR=1e-4; measured start: ~2 min a learner step on 2 busy cores, so ~90 min for the four runs
# (STEPS=6 measured steps instead of 10: ~60 min).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
OUT=${OUT:-benchmarks/results/async_correction.json}
TMP=$(mktemp -d)
for age in 1 4; do
  for corr in none token; do
    extra=()
    [ "$corr" = token ] && extra=(--rollout-is token --rollout-is-threshold 2.0)
    "$PYTHON" benchmarks/bench_async_vs_sync.py --only async --max-age "$age" --steps "${STEPS:-10}" --lr "${LR:-3e-3}" \
      --model "${MODEL:-tiny-sft}" --max-new-tokens "${MAX_NEW_TOKENS:-32}" \
      "${extra[@]}" \
      --json "$TMP/age${age}_${corr}.json" > "$TMP/age${age}_${corr}.log" 2>&1
  done
done
"$PYTHON" - "$TMP" "$OUT" <<'PY'
import json, sys
from pathlib import Path
tmp, out = Path(sys.argv[1]), Path(sys.argv[2])
keep = ("rollouts_trained_per_s", "rollouts_generated_per_s", "learner_step_s_median", "frac_on_policy",
        "stale_dropped", "used_version_lag", "reward_mean", "reward_mean_last_half", "rollout_corr/kl_mean",
        "rollout_corr/is_weight_mean_mean", "rollout_corr/is_weight_max_mean", "actor/pg_clipfrac_mean")
runs = {}
for path in sorted(tmp.glob("age*.json")):
    summary = next(r for r in json.loads(path.read_text()) if r["mode"] == "async")
    runs[path.stem] = {k: summary.get(k) for k in keep}
result = {"command": "bash benchmarks/evidence/async_correction.sh",
          "settings": "model " + __import__("os").environ.get("MODEL", "tiny-sft") + ", RLOO, 4 prompts x 4 samples "
                      "x " + __import__("os").environ.get("MAX_NEW_TOKENS", "32") + " tokens per learner step, "
                      + __import__("os").environ.get("STEPS", "10") + " measured steps, learner lr "
                      + __import__("os").environ.get("LR", "3e-3"),
          "runs": runs}
out.write_text(json.dumps(result, indent=2, default=str) + "\n")
print(json.dumps(result, indent=2, default=str))
PY
rm -rf "$TMP"
