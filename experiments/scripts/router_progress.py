"""Summarise a router evidence run's ``metrics.jsonl`` into a small committed JSON (issue 19 §3.2 progress).

    python experiments/scripts/router_progress.py outputs/evidence/router_lmcost_smollm2_sft_b0.3/metrics.jsonl \
        experiments/runs/router-01/lmcost_smollm2_sft_b0.3_progress.json --issue "..." --command "..." --settings "..."

Keeps the validation records (``val/*``) and, per training step, the router's metrics, the task reward's parts and the
step time; adds the mean tool cost over the last third of the logged steps against the budget.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TRAIN_KEYS = (
    "router/lambda",
    "router/mean_cost",
    "router/budget",
    "router/frac_answer",
    "router/frac_search",
    "router/frac_calculate",
    "router/tool_use_rate_when_answer",
    "router/mixed_cost_groups_frac",
    "router/mean_task_reward",
    "router/mean_router_reward",
    "router/route_entropy",
    "router/route_acc_vs_weak_label",
    "critic/score/mean",
    "critic/format_score/mean",
    "critic/correctness_score/mean",
    "response/tool_call_rate",
    "timing_s/step",
    "router/policy_cost",
    "router/policy_task_reward",
    "router/policy_prob_answer",
    "router/policy_prob_search",
    "router/policy_prob_calculate",
    "router/value_loss",
    "router/value_explained_var",
    "router/value_gap_std",
    "router/value_baseline_answer",
    "router/value_baseline_search",
    "router/value_baseline_calculate",
)


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
            train.append(
                {
                    "step": record.get("step"),
                    **{k: round(record[k], 4) for k in TRAIN_KEYS if isinstance(record.get(k), (int, float))},
                }
            )
    tail = train[len(train) - max(1, len(train) // 3) :] if train else []
    last_third = {}
    if tail:
        costs = [r["router/mean_cost"] for r in tail if "router/mean_cost" in r]
        # what the router's policy spends (= the batch mean when routes were sampled from it; the expectation under
        # the policy with router.route_sampling=stratified, whose batches are routed uniformly)
        policy = [r["router/policy_cost"] for r in tail if "router/policy_cost" in r]
        last_third = {
            "steps": [tail[0]["step"], tail[-1]["step"]],
            "mean_cost": round(sum(costs) / len(costs), 4) if costs else None,
            "budget": tail[-1].get("router/budget"),
        }
        if policy:
            last_third["policy_cost"] = round(sum(policy) / len(policy), 4)
    return {
        "validation": validation,
        "train_steps": train,
        "last_third": last_third,
        "budget_phases": budget_phases(train),
    }


def budget_phases(train: list[dict]) -> list[dict]:
    """Per run of consecutive steps with one budget (a resumed run may change ``router.budget_B``): its steps, and
    over its last third the mean policy cost (else the batch's) and its distance from the budget."""
    phases: list[list[dict]] = []
    for record in train:
        if phases and phases[-1][-1].get("router/budget") == record.get("router/budget"):
            phases[-1].append(record)
        else:
            phases.append([record])
    out = []
    for records in phases:
        tail = records[len(records) - max(1, len(records) // 3) :]
        key = "router/policy_cost" if all("router/policy_cost" in r for r in tail) else "router/mean_cost"
        cost = sum(r[key] for r in tail) / len(tail)
        budget = records[0].get("router/budget")
        out.append(
            {
                "budget": budget,
                "steps": [records[0]["step"], records[-1]["step"]],
                "last_third_steps": [tail[0]["step"], tail[-1]["step"]],
                "last_third_cost": round(cost, 4),
                "last_third_cost_minus_budget": round(cost - budget, 4) if budget is not None else None,
            }
        )
    return out


def plot(summary: dict, path: str, title: str, phases: list[tuple[int, str]]) -> None:
    """λ, the policy's (else the batch's) mean cost against B, and the policy's ANSWER probability per training step;
    ``phases`` mark the steps after which a resumed run changed its settings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = summary["train_steps"]
    x = [r["step"] for r in steps]
    fig, (ax_cost, ax_lam) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    cost_key = "router/policy_cost" if all("router/policy_cost" in r for r in steps) else "router/mean_cost"
    ax_cost.plot(x, [r[cost_key] for r in steps], label=cost_key.split("/")[-1].replace("_", " "))
    if all("router/policy_prob_answer" in r for r in steps):
        ax_cost.plot(x, [r["router/policy_prob_answer"] for r in steps], label="P(ANSWER)", linestyle=":")
    ax_cost.step(
        x, [r["router/budget"] for r in steps], where="mid", color="grey", linestyle="--", linewidth=1, label="B"
    )
    ax_cost.set_ylabel("cost / probability")
    ax_cost.legend(fontsize=8, loc="upper left")
    ax_lam.plot(x, [r["router/lambda"] for r in steps], color="tab:red")
    ax_lam.set_ylabel("λ")
    ax_lam.set_xlabel("training step")
    for step, label in phases:
        for ax in (ax_cost, ax_lam):
            ax.axvline(step + 0.5, color="black", linewidth=0.6)
        ax_cost.text(step + 0.7, 1.02, label, fontsize=7, va="bottom", transform=ax_cost.get_xaxis_transform())
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics")
    parser.add_argument("output")
    parser.add_argument("--issue", default="")
    parser.add_argument("--command", default="")
    parser.add_argument("--settings", default="")
    parser.add_argument("--reading", default="", help="what the numbers say (kept in the JSON beside them)")
    parser.add_argument("--plot", default=None, help="PNG of λ, cost and P(ANSWER) per step")
    parser.add_argument("--phases", default="", help="STEP:LABEL;... resumed-run setting changes after STEP")
    args = parser.parse_args(argv)
    summary = summarise(Path(args.metrics))
    if args.plot:
        phases = [(int(p.split(":", 1)[0]), p.split(":", 1)[1]) for p in args.phases.split(";") if p]
        plot(summary, args.plot, Path(args.metrics).parent.name, phases)
    out = {"issue": args.issue, "command": args.command, "settings": args.settings, **summary}
    if args.reading:
        out["reading"] = args.reading
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    print(f"{len(summary['train_steps'])} training steps, {len(summary['validation'])} validations -> {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
