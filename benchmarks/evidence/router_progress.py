"""Summarise a router evidence run's ``metrics.jsonl`` into a small committed JSON (issue 19 §3.2 progress).

    python benchmarks/evidence/router_progress.py outputs/evidence/router_lmcost_smollm2_sft_b0.3/metrics.jsonl \
        benchmarks/results/router_lmcost_smollm2_sft_b0.3_progress.json --issue "..." --command "..." --settings "..."

Keeps the validation records (``val/*``) and, per training step, the router's metrics, the task reward's parts and the
step time; adds the mean tool cost over the last third of the logged steps against the budget.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

TRAIN_KEYS = ("router/lambda", "router/mean_cost", "router/budget", "router/frac_answer", "router/frac_search",
              "router/frac_calculate", "router/tool_use_rate_when_answer", "router/mixed_cost_groups_frac",
              "router/mean_task_reward",
              "router/mean_router_reward", "router/route_entropy", "router/route_acc_vs_weak_label",
              "critic/score/mean", "critic/format_score/mean", "critic/correctness_score/mean",
              "response/tool_call_rate", "timing_s/step", "router/policy_cost", "router/policy_task_reward",
              "router/policy_prob_answer", "router/policy_prob_search", "router/policy_prob_calculate")


def summarise(metrics_file: Path) -> dict:
    """``{"validation": [...], "train_steps": [...], "last_third": {...}}`` from one run's metrics records."""
    validation, train = [], []
    for line in metrics_file.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        val = {k: round(v, 4) for k, v in record.items() if k.startswith("val/") and isinstance(v, (int, float))}
        if val:
            validation.append({"step": record.get("step"), **val})
        if "router/lambda" in record:
            train.append({"step": record.get("step"),
                          **{k: round(record[k], 4) for k in TRAIN_KEYS if isinstance(record.get(k), (int, float))}})
    tail = train[len(train) - max(1, len(train) // 3):] if train else []
    last_third = {}
    if tail:
        costs = [r["router/mean_cost"] for r in tail if "router/mean_cost" in r]
        # what the router's policy spends (= the batch mean when routes were sampled from it; the expectation under
        # the policy with router.route_sampling=stratified, whose batches are routed uniformly)
        policy = [r["router/policy_cost"] for r in tail if "router/policy_cost" in r]
        last_third = {"steps": [tail[0]["step"], tail[-1]["step"]],
                      "mean_cost": round(sum(costs) / len(costs), 4) if costs else None,
                      "budget": tail[-1].get("router/budget")}
        if policy:
            last_third["policy_cost"] = round(sum(policy) / len(policy), 4)
    return {"validation": validation, "train_steps": train, "last_third": last_third}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics")
    parser.add_argument("output")
    parser.add_argument("--issue", default="")
    parser.add_argument("--command", default="")
    parser.add_argument("--settings", default="")
    parser.add_argument("--reading", default="", help="what the numbers say (kept in the JSON beside them)")
    args = parser.parse_args(argv)
    summary = summarise(Path(args.metrics))
    out = {"issue": args.issue, "command": args.command, "settings": args.settings, **summary}
    if args.reading:
        out["reading"] = args.reading
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    print(f"{len(summary['train_steps'])} training steps, {len(summary['validation'])} validations -> {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
