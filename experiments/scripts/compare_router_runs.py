"""Step-by-step comparison of a router run's ``metrics.jsonl`` with an earlier run's committed progress JSON.

    python experiments/scripts/compare_router_runs.py experiments/runs/ID/progress.json RUN_DIR/metrics.jsonl

For every training step both hold, prints λ, the task reward and the policy's expected cost of each run and the step
time of the new one, then how many steps were compared and the largest absolute difference of each compared metric.
The progress JSON keeps four decimals (``router_progress.py``), so runs that are the same differ by at most 5e-5.
Two runs that share no training step are an error (exit status 2), not an empty comparison.
"""

import json
import sys

KEYS = ("router/lambda", "router/mean_task_reward", "router/policy_cost", "router/mean_cost", "critic/score/mean")


def main(ref_path: str, metrics_path: str) -> dict:
    with open(ref_path) as fh:
        ref = {s["step"]: s for s in json.load(fh)["train_steps"]}
    with open(metrics_path) as fh:
        new = [json.loads(line) for line in fh if line.strip()]
    shared = [r for r in new if "text" not in r and "router/lambda" in r and r["step"] in ref]
    if not shared:
        print(
            f"error: {metrics_path} and {ref_path} share no training step (the new run holds steps "
            f"{sorted({r['step'] for r in new if 'router/lambda' in r})}, the reference {sorted(ref)})",
            file=sys.stderr,
        )
        raise SystemExit(2)
    worst = {k: 0.0 for k in KEYS}
    for record in shared:
        old = ref[record["step"]]
        for k in KEYS:
            worst[k] = max(worst[k], abs(record[k] - old[k]))
        print(
            record["step"],
            [(round(record[k], 4), round(old[k], 4)) for k in KEYS[:3]],
            round(record["timing_s/step"], 1),
        )
    print(f"{len(shared)} steps compared ({shared[0]['step']}-{shared[-1]['step']}); max abs diff", worst)
    return worst


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare_router_runs.py REF_progress.json RUN_DIR/metrics.jsonl")
    main(*sys.argv[1:3])
