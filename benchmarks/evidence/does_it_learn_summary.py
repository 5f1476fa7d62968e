"""Issue 19 at a glance: every router head and GRPO run of README "Does it learn?" in one table and one figure, read
from the committed result files only (no model, no generation).

    python benchmarks/evidence/does_it_learn_summary.py \
        --output benchmarks/results/does_it_learn_summary.json --plot benchmarks/results/does_it_learn_summary.png

What it reads and reports:

- Router heads (:data:`HEADS`): for each benchmark sample a head was scored on (``router_frontier.py`` files), the
  head's policy in expectation over its routes — mean route cost, mean score (the RLLA reward, or BFCL accuracy), the
  paired gain over random routing at the same cost (with the head's own SEARCH : CALCULATE split where the file has it,
  else at the same cost only) with its standard error and t, the share of tool routes on prompts whose ground truth
  calls a tool and on those whose does not, and the call / no-call decision F1 of its routes in expectation
  (:func:`expected_decision_f1`); from the run's progress file, the policy's mean tool cost over the last third of
  training against its budget and the final λ.
- GRPO runs (:data:`GRPO`): the paired per-prompt correctness gain over the start on RLLA's validation prompts
  <= 1,024 tokens (``paired_by_prompt_length.py`` files), with how both models were decoded.
- The figure: (a) cost against RLLA score on the 63 validation prompts <= 1,024 tokens for every head scored there and
  the fixed policies of its actor (never-tools, always-SEARCH / CALCULATE, and the segment random routing traces);
  (b) the router gains over random routing at the same cost, ±2 standard errors, on every sample; (c) the GRPO
  correctness gains, ±2 standard errors.

A file in the lists that is missing or lacks a named point is an error that names the file and the key.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
GAIN_KEYS = ("paired_vs_random_same_cost_same_split_expected", "paired_vs_random_same_cost_expected")

# (item in README "Does it learn?", label, actor, (progress file, budget phase), [(sample, frontier file, point), ...])
HEADS = [
    ("4", "SGD value head, B=0.3", "sft", ("router_value_norm_smollm2_sft_b0.3_progress.json", 0),
     [("RLLA val (33, <=768 tok)", "router_value_norm_b0.3_step36_frontier.json", "learned_expected")]),
    ("6", "ridge head, B=0.3", "sft", ("router_ridge_smollm2_sft_b0.3_progress.json", 0),
     [("RLLA val", "router_ridge_b0.3_step41_frontier.json", "learned_expected"),
      ("BFCL rows 1-12 (item 10)", "router_ridge_b0.3_rerun_step41_bfcl_frontier.json", "learned_expected"),
      ("BFCL rows 1-12 (item 10), re-priced", "router_ridge_b0.3_rerun_step41_bfcl_frontier.json",
       "learned_calibrated_expected"),
      ("BFCL rows 13-30 (item 10)", "router_ridge_b0.3_rerun_step41_bfcl_rows13to30_frontier.json", "learned_expected")]),
    ("7", "ridge head, B=0.5 (item 6's run resumed)", "sft", ("router_ridge_smollm2_sft_b0.3_progress.json", 1),
     [("RLLA val", "router_ridge_b0.5_step56_frontier.json", "learned_expected")]),
    ("8", "ridge head on the GRPO actor, B=0.3", "grpo", ("router_ridge_grpo_actor_b0.3_progress.json", 0),
     [("RLLA val", "router_ridge_grpo_actor_b0.3_step41_frontier.json", "learned_expected"),
      ("BFCL rows 1-12", "router_ridge_grpo_actor_b0.3_step41_bfcl_frontier.json", "learned_expected"),
      ("BFCL rows 1-12, re-priced", "router_ridge_grpo_actor_b0.3_step41_bfcl_frontier.json",
       "learned_calibrated_expected")]),
    ("11", "ridge head + irrelevance rows, B=0.3", "sft", ("router_ridge_irrel_smollm2_sft_b0.3_progress.json", 0),
     [("RLLA val", "router_ridge_irrel_b0.3_step41_frontier.json", "learned_expected"),
      ("BFCL rows 1-12", "router_ridge_irrel_b0.3_step41_bfcl_frontier.json", "learned_expected"),
      ("BFCL rows 1-12, re-priced", "router_ridge_irrel_b0.3_step41_bfcl_frontier.json", "learned_calibrated_expected"),
      ("BFCL rows 13-30", "router_ridge_irrel_b0.3_step41_bfcl_rows13to30_frontier.json", "learned_expected"),
      ("BFCL rows 13-30, re-priced", "router_ridge_irrel_b0.3_step41_bfcl_rows13to30_frontier.json",
       "learned_calibrated_expected")]),
    ("12", "the main job's default (smollm2), B=0.3", "sft", ("router_default_smollm2_sft_progress.json", 0),
     [("RLLA val", "router_default_smollm2_step50_rlla_frontier.json", "learned_expected"),
      ("RLLA val, re-priced to 0.3", "router_default_smollm2_step50_rlla_frontier.json",
       "learned_calibrated_expected"),
      ("BFCL rows 31-60", "router_default_smollm2_step50_bfcl_rows31to60_frontier.json", "learned_expected"),
      ("BFCL rows 31-60, re-priced", "router_default_smollm2_step50_bfcl_rows31to60_frontier.json",
       "learned_calibrated_expected"),
      ("API-Bank L1 (26)", "router_default_smollm2_step50_api_bank_l1_first40_frontier.json", "learned_expected"),
      ("API-Bank L1 (26), re-priced", "router_default_smollm2_step50_api_bank_l1_first40_frontier.json",
       "learned_calibrated_expected")]),
]
# fixed-price (fixed-penalty) points of a head, drawn in panel (a): (item, frontier file, point)
FIXED_PRICE = [("6", "router_ridge_b0.3_step41_frontier.json", "lambda_2_expected"),
               ("6", "router_ridge_b0.3_step41_frontier.json", "lambda_6_expected"),
               ("8", "router_ridge_grpo_actor_b0.3_step41_frontier.json", "lambda_2_expected"),
               ("8", "router_ridge_grpo_actor_b0.3_step41_frontier.json", "lambda_6_expected")]
# the fixed policies of each actor on RLLA's 63 validation prompts: a frontier file that holds them
ACTOR_BASELINES = {"sft": "router_default_smollm2_step50_rlla_frontier.json",
                   "grpo": "router_ridge_grpo_actor_b0.3_step41_frontier.json"}
# (label, paired file, decoding): correctness on the validation prompts <= 1,024 tokens, paired against the start
_B16 = "grpo_smollm2_sft_p1024_r256_b16_mb4_lr1e-5_t0.5_refined_klloss"
GRPO = [
    ("8x4, 128 tok, step 40", "grpo_smollm2_sft_p1024_paired_r128.json", "greedy, 128 tok"),
    ("8x4, 256 tok, step 40", "grpo_smollm2_sft_p1024_r256_paired.json", "greedy"),
    ("8x4, 256 tok, step 40", "grpo_smollm2_sft_p1024_r256_sampled_paired.json", "sampled at 1 (both)"),
    ("8x4, 256 tok, step 40", "grpo_smollm2_sft_p1024_r256_sampled_vs_sft_t0.5_paired.json",
     "trained at 1 vs start at 0.5"),
    ("8x4, 256 tok, step 40", "grpo_smollm2_sft_p1024_r256_sampled_t0.5_paired.json", "sampled at 0.5"),
    ("8x4 at T=0.5, step 20", "grpo_smollm2_sft_p1024_r256_mb2_lr1e-5_t0.5_step20_sampled_t0.5_paired.json",
     "sampled at 0.5"),
    ("8x4 refined+KL loss, step 24",
     "grpo_smollm2_sft_p1024_r256_mb2_lr1e-5_t0.5_refined_klloss_step24_sampled_t0.5_paired.json", "sampled at 0.5"),
    ("8x4 refined+KL loss, step 31",
     "grpo_smollm2_sft_p1024_r256_mb2_lr1e-5_t0.5_refined_klloss_step31_sampled_t0.5_paired.json", "sampled at 0.5"),
    ("16x4 seed 1, step 15", f"{_B16}_step15_sampled_t0.5_paired.json", "sampled at 0.5"),
    ("16x4 seed 1, step 20", f"{_B16}_step20_sampled_t0.5_paired.json", "sampled at 0.5"),
    ("16x4 seed 1, step 25", f"{_B16}_step25_sampled_t0.5_paired.json", "sampled at 0.5"),
    ("16x4 seed 1, step 30", f"{_B16}_step30_sampled_t0.5_paired.json", "sampled at 0.5"),
    ("16x4 seed 2, step 20", f"{_B16}_seed2_step20_sampled_t0.5_paired.json", "sampled at 0.5"),
    ("16x4 seed 2, step 20", f"{_B16}_seed2_step20_greedy_paired.json", "greedy"),
]


def _load(name: str, results: Path) -> dict:
    path = results / name
    if not path.is_file():
        raise FileNotFoundError(f"does_it_learn_summary: {path} is missing (listed in the script's manifest)")
    return json.loads(path.read_text())


def _need(mapping: dict, key: str, where: str):
    if key not in mapping:
        raise KeyError(f"does_it_learn_summary: {where} has no '{key}' (has: {', '.join(sorted(mapping))})")
    return mapping[key]


def expected_decision_f1(point: dict) -> float | None:
    """F1 of a routing policy's call / no-call decision, a tool route (SEARCH or CALCULATE) counting as "call", in
    expectation over its routes: with ``n1`` prompts whose ground truth calls a tool (tool-route share ``f1``) and
    ``n0`` whose ground truth calls none (share ``f0``), TP = n1·f1, FN = n1·(1 − f1), FP = n0·f0 and
    F1 = 2·TP / (2·TP + FP + FN) — the ``decision_f1`` of ``verl.trainer.tool_cost.tool_cost_metrics`` on expected
    counts. None when no prompt calls a tool and no route is a tool route (0 / 0).
    """
    call, no_call = point.get("ground_truth_calls_a_tool") or {}, point.get("ground_truth_calls_no_tool") or {}
    n1, n0 = call.get("rows", 0), no_call.get("rows", 0)
    tp = n1 * (call.get("tool_route_frac") or 0.0)
    fn = n1 - tp
    fp = n0 * (no_call.get("tool_route_frac") or 0.0)
    den = 2 * tp + fp + fn
    return 2 * tp / den if den else None


def head_gain(point: dict, where: str) -> dict:
    """The paired gain in score over random routing at the same cost: with the head's own SEARCH : CALCULATE split
    where the file has it (``router_frontier.py``), else at the same cost with an even split. Returns ``{"mean",
    "se", "t", "versus"}``; ``t`` is None when the standard error is 0."""
    for key in GAIN_KEYS:
        if key in point:
            gain = point[key]["score"]
            se = gain["se"]
            return {"mean": gain["mean"], "se": se, "t": gain["mean"] / se if se else None, "versus": key}
    raise KeyError(f"does_it_learn_summary: {where} has none of {', '.join(GAIN_KEYS)}")


def last_third(progress: dict, phase: int = 0) -> dict:
    """Budget, policy cost over the last third of training and λ at the end of budget phase ``phase`` of a router
    run's progress file (a run resumed with another ``router.budget_B`` has one phase per budget; a file without
    ``budget_phases`` is one phase, its ``last_third``)."""
    if "budget_phases" in progress:
        phases = progress["budget_phases"]
        if phase >= len(phases):
            raise KeyError(f"does_it_learn_summary: the progress file has {len(phases)} budget phase(s), not {phase + 1}")
        cost, budget, end = phases[phase]["last_third_cost"], phases[phase]["budget"], phases[phase]["steps"][1]
    else:
        third = _need(progress, "last_third", "progress file")
        cost, budget, end = third.get("policy_cost", third.get("mean_cost")), third["budget"], third["steps"][1]
    lam = [s["router/lambda"] for s in progress.get("train_steps", []) if s.get("step") == end and "router/lambda" in s]
    return {"budget": budget, "policy_cost_last_third": cost, "last_step": end, "final_lambda": lam[0] if lam else None}


def summarise(results: Path = RESULTS) -> dict:
    """Everything the table and the figure show, from the files in ``results``."""
    heads = []
    for item, label, actor, progress, samples in HEADS:
        entry = {"item": item, "label": label, "actor": actor,
                 "training": last_third(_load(progress[0], results), progress[1]), "samples": []}
        for sample, name, key in samples:
            frontier = _load(name, results)
            point = _need(frontier["points"], key, name)
            entry["samples"].append({
                "sample": sample, "file": name, "point": key, "benchmark": frontier.get("benchmark", "rlla"),
                "budget": frontier["budget"], "rows": point["rows"], "cost": point["mean_cost"],
                "score": point["score"], "gain_vs_random_same_cost": head_gain(point, f"{name}:{key}"),
                "tool_route_frac_ground_truth_call": (point.get("ground_truth_calls_a_tool") or {}).get(
                    "tool_route_frac"),
                "tool_route_frac_ground_truth_no_call": (point.get("ground_truth_calls_no_tool") or {}).get(
                    "tool_route_frac"),
                "decision_f1": expected_decision_f1(point)})
        heads.append(entry)
    grpo = []
    for label, name, decoding in GRPO:
        paired = _load(name, results)
        split = paired.get("prompt<=1024") or {}
        block = split if "metrics" in split else _need(paired, "all", name)
        c = _need(block["metrics"], "correctness", name)
        grpo.append({"run": label, "decoding": decoding, "file": name, "prompts": c["n"], "before": c["before"],
                     "after": c["after"], "gain": c["gain"], "se": c["se"], "t": c["t"]})
    baselines = {}
    for actor, name in ACTOR_BASELINES.items():
        points = _load(name, results)["points"]
        baselines[actor] = {k: {"cost": _need(points, k, name)["mean_cost"], "score": points[k]["score"]["mean"]}
                            for k in ("answer", "search", "calculate")}
    fixed = [{"item": item, "point": key, "cost": p["mean_cost"], "score": p["score"]["mean"]}
             for item, name, key in FIXED_PRICE for p in [_need(_load(name, results)["points"], key, name)]]
    return {"issue": "19: the router heads and GRPO runs of README 'Does it learn?' at a glance",
            "command": "python benchmarks/evidence/does_it_learn_summary.py --output "
                       "benchmarks/results/does_it_learn_summary.json --plot "
                       "benchmarks/results/does_it_learn_summary.png",
            "heads": heads, "fixed_price": fixed, "actor_baselines_rlla_val": baselines, "grpo": grpo}


def markdown(summary: dict) -> str:
    """Two markdown tables: router heads (one row per sample) and GRPO runs."""
    lines = ["| item | head | trained: cost in the last third / B, final λ | sample | prompts | cost | score | "
             "gain over random at the same cost (t) | P(tool route): ground truth calls / does not | decision F1 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for head in summary["heads"]:
        tr = head["training"]
        trained = f"{tr['policy_cost_last_third']:.3f} / {tr['budget']}, λ {tr['final_lambda']:.2f}"
        for i, s in enumerate(head["samples"]):
            g = s["gain_vs_random_same_cost"]
            t = "–" if g["t"] is None else f"{g['t']:.1f}"
            bold = "**" if g["t"] is not None and g["t"] > 2 else ""
            f0 = s["tool_route_frac_ground_truth_no_call"]
            lines.append(
                f"| {head['item'] if i == 0 else ''} | {head['label'] if i == 0 else ''} | "
                f"{trained if i == 0 else ''} | {s['sample']} | {s['rows']} | {s['cost']:.2f} | "
                f"{s['score']['mean']:.3f} | {bold}{g['mean']:+.3f} ± {g['se']:.3f} ({t}){bold} | "
                f"{s['tool_route_frac_ground_truth_call']:.2f} / {'–' if f0 is None else f'{f0:.2f}'} | "
                f"{'–' if s['decision_f1'] is None else format(s['decision_f1'], '.2f')} |")
    lines += ["", "| GRPO run (from smollm2-135m-sft) | decoding | prompts | correctness before → after | "
              "paired gain ± se (t) |", "|---|---|---|---|---|"]
    for r in summary["grpo"]:
        bold = "**" if r["t"] is not None and r["t"] > 2 else ""
        lines.append(f"| {r['run']} | {r['decoding']} | {r['prompts']} | {r['before']:.2f} → {r['after']:.2f} | "
                     f"{bold}{r['gain']:+.2f} ± {r['se']:.2f} ({r['t']:.2f}){bold} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: str) -> None:
    """The three panels described in the module docstring."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(19, 8.5), gridspec_kw={"width_ratios": [1.1, 1.2, 1.0]})
    ax = axes[0]
    colours = {"sft": "tab:blue", "grpo": "tab:red"}
    names = {"sft": "SFT actor", "grpo": "GRPO actor (16x4 seed 2, step 20)"}
    for actor, base in summary["actor_baselines_rlla_val"].items():
        c = colours[actor]
        tool = (base["search"]["score"] + base["calculate"]["score"]) / 2
        ax.plot([0, 1], [base["answer"]["score"], tool], ls="--", color=c, alpha=0.5,
                label=f"{names[actor]}: random routing at any cost")
        ax.scatter([0, 1, 1], [base["answer"]["score"], base["search"]["score"], base["calculate"]["score"]],
                   marker="s", color=c, alpha=0.6)
    palette = dict(zip([h["item"] for h in summary["heads"]],  # the actors' blue and red are left out
                       ["tab:olive", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:cyan"]))
    for head in summary["heads"]:
        for s in head["samples"]:
            if s["sample"].startswith("RLLA val") and s["rows"] == 63:
                repriced = "re-priced" in s["sample"]
                ax.errorbar(s["cost"], s["score"]["mean"], yerr=s["score"]["se"], capsize=3,
                            fmt="D" if head["actor"] == "grpo" else "o", color=palette[head["item"]],
                            mfc="white" if repriced else None,
                            label=f"{head['item']}: {head['label']}{', re-priced to 0.3' if repriced else ''}")
    for f in summary["fixed_price"]:
        ax.scatter(f["cost"], f["score"], marker="^", color=palette[f["item"]],
                   label=f"{f['item']} at the fixed price λ = {f['point'].split('_')[1]}")
    ax.axvline(0.3, color="grey", lw=0.8)
    ax.set_xlabel("mean route cost (tool routes cost ~1)")
    ax.set_ylabel("RLLA score, 63 validation prompts ≤ 1,024 tokens")
    ax.set_title("(a) routing policies on RLLA validation (±1 se)\n■ never / always a tool; ● on the SFT actor, "
                 "◆ on the GRPO actor", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1)

    ax = axes[1]
    rows = [(f"{h['item']}: {s['sample']} (cost {s['cost']:.2f})", s["gain_vs_random_same_cost"],
             s["benchmark"] if not s["sample"].startswith("API") else "api_bank")
            for h in summary["heads"] for s in h["samples"]]
    scale = {"rlla": "RLLA score", "bfcl": "BFCL accuracy ×10", "api_bank": "RLLA score"}
    for y, (label, g, bench) in enumerate(reversed(rows)):
        k = 10 if bench == "bfcl" else 1
        passed = g["t"] is not None and abs(g["t"]) > 2
        ax.errorbar(g["mean"] * k, y, xerr=2 * g["se"] * k, fmt="o", capsize=3,
                    color={"rlla": "tab:blue", "bfcl": "tab:green", "api_bank": "tab:purple"}[bench],
                    mfc=None if passed else "white")
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=7)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("gain over random routing at the same cost, ±2 se\n"
                  "(blue: RLLA score; green: BFCL accuracy ×10; purple: API-Bank, RLLA score; filled: |t| > 2)")
    ax.set_title("(b) does the router pay for itself?", fontsize=10)

    ax = axes[2]
    for y, r in enumerate(reversed(summary["grpo"])):
        passed = r["t"] is not None and abs(r["t"]) > 2
        ax.errorbar(r["gain"], y, xerr=2 * r["se"], fmt="o", capsize=3, color="tab:orange",
                    mfc=None if passed else "white")
    ax.set_yticks(range(len(summary["grpo"])), [f"{r['run']}: {r['decoding']}" for r in reversed(summary["grpo"])],
                  fontsize=7)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("RLLA validation correctness: paired gain\nover the start, ±2 se (filled: |t| > 2)")
    ax.set_title("(c) does GRPO make the calls more correct?", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(RESULTS), help="folder of the result files (default: the repo's)")
    parser.add_argument("--output", required=True, help="summary JSON")
    parser.add_argument("--plot", help="PNG of the three panels")
    parser.add_argument("--markdown", help="the two tables as markdown (printed too)")
    args = parser.parse_args(argv)
    summary = summarise(Path(args.results))
    Path(args.output).write_text(json.dumps(summary, indent=1) + "\n")
    table = markdown(summary)
    if args.markdown:
        Path(args.markdown).write_text(table)
    if args.plot:
        plot(summary, args.plot)
    print(table)


if __name__ == "__main__":
    main()
