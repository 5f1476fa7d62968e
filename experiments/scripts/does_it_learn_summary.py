"""Issue 19 at a glance: every router head and GRPO run of README "Does it learn?" in one table and one figure, read
from the committed result files only (no model, no generation).

    python experiments/scripts/does_it_learn_summary.py \
        --output experiments/runs/summary/does_it_learn.json --plot experiments/runs/summary/does_it_learn.png

What it reads and reports:

- Router heads (:data:`HEADS`): for each benchmark sample a head was scored on (``router_frontier.py`` files), the
  head's policy in expectation over its routes — mean route cost, mean score (the RLLA reward, or BFCL accuracy), the
  paired gain over random routing at the same cost (:func:`head_gain`: with the head's own SEARCH : CALCULATE split
  where the file has it, else with SEARCH only, marked †) with its standard error and t, the share of tool routes on
  prompts whose ground truth calls a tool and on those whose does not, and the call / no-call decision F1 of its
  expected counts beside random routing's at the same rate (:func:`expected_decision_f1`); from the run's progress
  file, the policy's expected tool cost over the last third of training against its budget and λ at the end.
- GRPO runs (:data:`GRPO`): the paired per-prompt correctness gain over the start on RLLA's validation prompts
  <= 1,024 tokens (``paired_by_prompt_length.py`` files), with how both models were decoded, and BFCL accuracy paired
  per row (``main_eval --baseline``).
- The figure: (a) cost against RLLA score on the 63 validation prompts <= 1,024 tokens for every head scored there and
  the fixed policies of its actor (never-tools, always-SEARCH / CALCULATE, and the segment random routing traces);
  (b) the paired t of every router gain over random routing at the same cost, on every sample; (c) the GRPO
  RLLA correctness gains, ±2 standard errors.

A file in the lists that is missing or lacks a named point is an error that names the file and the key.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import statistics
from pathlib import Path

from verl.trainer.tool_cost import decision_f1

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "runs"
_spec = importlib.util.spec_from_file_location("pool_frontiers", Path(__file__).with_name("pool_frontiers.py"))
_pool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_pool)
OWN_SPLIT = _pool.GAIN  # random routing at the head's cost with the head's own SEARCH : CALCULATE split
SEARCH_ONLY = "paired_vs_random_same_cost_expected"  # random routing at the head's cost, SEARCH its only tool route
# the 63 / 33 RLLA validation prompts <= 1,024 / 768 tokens; the 63 with irrelevance rows made from the validation
# split (verl.router.irrelevance, the training rows' fraction and seed); BFCL; API-Bank
KINDS = ("rlla63", "rlla33", "rlla_irrel", "bfcl", "api_bank")

# (item of experiments/notebook.md, label, actor, (progress file, budget phase),
#  [(sample, kind, frontier file, point), ...])
HEADS = [
    (
        "4",
        "SGD value head, B=0.3",
        "sft",
        ("router-04/smollm2_sft_b0.3_progress.json", 0),
        [("RLLA val (33, <=768 tok)", "rlla33", "router-04/b0.3_step36_frontier.json", "learned_expected")],
    ),
    (
        "6",
        "ridge head, B=0.3",
        "sft",
        ("router-06/smollm2_sft_b0.3_progress.json", 0),
        [
            ("RLLA val (item 10's rerun)", "rlla63", "router-10/step41_frontier.json", "learned_expected"),
            ("BFCL rows 1-12 (item 10)", "bfcl", "router-10/step41_bfcl_frontier.json", "learned_expected"),
            (
                "BFCL rows 1-12 (item 10), re-priced",
                "bfcl",
                "router-10/step41_bfcl_frontier.json",
                "learned_calibrated_expected",
            ),
            ("BFCL rows 13-30 (item 10)", "bfcl", "router-10/step41_bfcl_rows13to30_frontier.json", "learned_expected"),
        ],
    ),
    (
        "7",
        "ridge head, B=0.5 (item 6's run resumed)",
        "sft",
        ("router-06/smollm2_sft_b0.3_progress.json", 1),
        [("RLLA val", "rlla63", "router-07/b0.5_step56_frontier.json", "learned_expected")],
    ),
    (
        "8",
        "ridge head on the GRPO actor, B=0.3",
        "grpo",
        ("router-08/progress.json", 0),
        [
            ("RLLA val", "rlla63", "router-08/step41_frontier.json", "learned_expected"),
            ("BFCL rows 1-12 (item 9)", "bfcl", "router-09/step41_bfcl_frontier.json", "learned_expected"),
            (
                "BFCL rows 1-12 (item 9), re-priced",
                "bfcl",
                "router-09/step41_bfcl_frontier.json",
                "learned_calibrated_expected",
            ),
        ],
    ),
    (
        "11",
        "ridge head + irrelevance rows, B=0.3",
        "sft",
        ("router-11/progress.json", 0),
        [
            ("RLLA val", "rlla63", "router-11/step41_frontier.json", "learned_expected"),
            ("BFCL rows 1-12", "bfcl", "router-11/step41_bfcl_frontier.json", "learned_expected"),
            ("BFCL rows 1-12, re-priced", "bfcl", "router-11/step41_bfcl_frontier.json", "learned_calibrated_expected"),
            ("BFCL rows 13-30", "bfcl", "router-11/step41_bfcl_rows13to30_frontier.json", "learned_expected"),
            (
                "BFCL rows 13-30, re-priced",
                "bfcl",
                "router-11/step41_bfcl_rows13to30_frontier.json",
                "learned_calibrated_expected",
            ),
        ],
    ),
    (
        "12",
        "the main job's default (smollm2), B=0.3",
        "sft",
        ("router-12/progress.json", 0),
        [
            ("RLLA val", "rlla63", "router-12/rlla_frontier.json", "learned_expected"),
            ("RLLA val, re-priced to 0.3", "rlla63", "router-12/rlla_frontier.json", "learned_calibrated_expected"),
            ("RLLA val + its irrelevance rows", "rlla_irrel", "router-12/rlla_irrel_frontier.json", "learned_expected"),
            (
                "RLLA val + its irrelevance rows, re-priced",
                "rlla_irrel",
                "router-12/rlla_irrel_frontier.json",
                "learned_calibrated_expected",
            ),
            ("BFCL rows 31-60", "bfcl", "router-12/bfcl_rows31to60_frontier.json", "learned_expected"),
            (
                "BFCL rows 31-60, re-priced",
                "bfcl",
                "router-12/bfcl_rows31to60_frontier.json",
                "learned_calibrated_expected",
            ),
            ("API-Bank L1 (26)", "api_bank", "router-12/api_bank_l1_first40_frontier.json", "learned_expected"),
            (
                "API-Bank L1 (26), re-priced",
                "api_bank",
                "router-12/api_bank_l1_first40_frontier.json",
                "learned_calibrated_expected",
            ),
        ],
    ),
]
# fixed-price (fixed-penalty) points of a head, drawn in panel (a): (item, frontier file, point)
FIXED_PRICE = [
    ("6", "router-10/step41_frontier.json", "lambda_2_expected"),
    ("6", "router-10/step41_frontier.json", "lambda_6_expected"),
    ("8", "router-08/step41_frontier.json", "lambda_2_expected"),
    ("8", "router-08/step41_frontier.json", "lambda_6_expected"),
]
# the fixed policies of each actor on RLLA's 63 validation prompts: a frontier file that holds them
ACTOR_BASELINES = {"sft": "router-12/rlla_frontier.json", "grpo": "router-08/step41_frontier.json"}
_SAMPLED = "sampled at 0.5"
# the progress file of each GRPO run (its training cost: steps and median seconds per step), by the run's label
GRPO_RUNS = {
    "8x4, 128 tok, step 40": "grpo-02/training.json",
    "8x4, 256 tok, step 40": "grpo-03/training.json",
    "8x4 at T=0.5, step 20": "grpo-05/progress.json",
    "8x4 refined+KL loss": "grpo-06/progress.json",
    "16x4 seed 1": "grpo-07/progress.json",
    "16x4 seed 2": "grpo-08/progress.json",
    "16x4 + irrelevance rows": "grpo-09/progress.json",
}
# (label, paired file, decoding, metric, note): paired against the start per prompt (RLLA: the validation prompts
# <= 1,024 tokens, ``prompt<=1024`` of paired_by_prompt_length.py; BFCL: main_eval --baseline, per BFCL row)
GRPO = [
    (
        "8x4, 128 tok, step 40",
        "grpo-02/paired_r128.json",
        "greedy, 128 tok",
        "correctness",
        "all of it on the 20 prompts whose start did not fit 128 tokens",
    ),
    ("8x4, 256 tok, step 40", "grpo-03/paired.json", "greedy", "correctness", ""),
    (
        "8x4, 256 tok, step 40",
        "grpo-03/sampled_paired.json",
        "sampled at 1 (both)",
        "correctness",
        "sharpening: the start at 0.5 beats it (next row)",
    ),
    (
        "8x4, 256 tok, step 40",
        "grpo-03/sampled_vs_sft_t0.5_paired.json",
        "trained at 1 vs start at 0.5",
        "correctness",
        "the control",
    ),
    ("8x4, 256 tok, step 40", "grpo-03/sampled_t0.5_paired.json", _SAMPLED, "correctness", ""),
    ("8x4 at T=0.5, step 20", "grpo-05/step20_sampled_t0.5_paired.json", _SAMPLED, "correctness", ""),
    ("8x4 refined+KL loss, step 24", "grpo-06/step24_sampled_t0.5_paired.json", _SAMPLED, "correctness", ""),
    ("8x4 refined+KL loss, step 31", "grpo-06/step31_sampled_t0.5_paired.json", _SAMPLED, "correctness", ""),
    ("16x4 seed 1, step 15", "grpo-07/step15_sampled_t0.5_paired.json", _SAMPLED, "correctness", ""),
    (
        "16x4 seed 1, step 20",
        "grpo-07/step20_sampled_t0.5_paired.json",
        _SAMPLED,
        "correctness",
        "the best of the four seed-1 checkpoints evaluated",
    ),
    ("16x4 seed 1, step 25", "grpo-07/step25_sampled_t0.5_paired.json", _SAMPLED, "correctness", ""),
    ("16x4 seed 1, step 30", "grpo-07/step30_sampled_t0.5_paired.json", _SAMPLED, "correctness", ""),
    (
        "16x4 seed 2, step 20",
        "grpo-08/step20_sampled_t0.5_paired.json",
        _SAMPLED,
        "correctness",
        "fixed in advance; the same start samples as seed 1",
    ),
    ("16x4 seed 2, step 20", "grpo-08/step20_greedy_paired.json", "greedy", "correctness", ""),
    (
        "16x4 seed 2, step 20",
        "grpo-08/step20_bfcl20_paired.json",
        "greedy",
        "bfcl_accuracy",
        "BFCL, 20 rows a category",
    ),
    (
        "16x4 + irrelevance rows, step 25",
        "grpo-09/step25_sampled_t0.5_paired.json",
        _SAMPLED,
        "correctness",
        "fixed in advance (test 1)",
    ),
    ("16x4 + irrelevance rows, step 25", "grpo-09/step25_greedy_paired.json", "greedy", "correctness", ""),
    (
        "16x4 + irrelevance rows, step 25",
        "grpo-09/step25_bfcl20_paired.json",
        "greedy",
        "bfcl_accuracy",
        "fixed in advance (test 2); BFCL, 20 rows a category",
    ),
]


def _load(name: str, results: Path) -> dict:
    path = results / name
    if not path.is_file():
        raise FileNotFoundError(f"does_it_learn_summary: {path} is missing (listed in the script's manifest)")
    return json.loads(path.read_text())


def _need(mapping: dict, key: str, where: str):
    if not isinstance(mapping, dict) or key not in mapping:
        have = ", ".join(sorted(mapping)) if isinstance(mapping, dict) else type(mapping).__name__
        raise KeyError(f"does_it_learn_summary: {where} has no '{key}' (has: {have})")
    return mapping[key]


def _tool_groups(point: dict) -> tuple[int, float, int, float]:
    """``(n1, f1, n0, f0)``: prompts whose ground truth calls a tool and the policy's tool-route share on them, then
    the same for the prompts whose ground truth calls none (a missing group counts 0 prompts)."""
    call, no_call = point.get("ground_truth_calls_a_tool") or {}, point.get("ground_truth_calls_no_tool") or {}
    return (
        call.get("rows", 0),
        call.get("tool_route_frac") or 0.0,
        no_call.get("rows", 0),
        no_call.get("tool_route_frac") or 0.0,
    )


def expected_decision_f1(point: dict) -> tuple[float | None, float | None]:
    """``(policy, random)``: the F1 of the call / no-call decision of a routing policy, a tool route (SEARCH or
    CALCULATE) counting as "call", computed on its expected counts — with ``n1`` prompts whose ground truth calls a
    tool (tool-route share ``f1``) and ``n0`` whose ground truth calls none (share ``f0``), TP = n1·f1,
    FN = n1·(1 − f1), FP = n0·f0 (``verl.trainer.tool_cost.decision_f1``; the F1 of expected counts, not the expected
    F1) — and the same for random routing at the policy's overall tool rate ``r = (n1·f1 + n0·f0)/(n1 + n0)``
    (``f1 = f0 = r``), the reference the policy's F1 is read against: a policy that spends more has a higher F1 with
    no targeting at all. None where 0 / 0.
    """
    n1, f1, n0, f0 = _tool_groups(point)
    rate = (n1 * f1 + n0 * f0) / (n1 + n0) if n1 + n0 else 0.0
    return (decision_f1(n1 * f1, n0 * f0, n1 * (1 - f1)), decision_f1(n1 * rate, n0 * rate, n1 * (1 - rate)))


def head_gain(point: dict, where: str) -> dict:
    """The paired gain in score over random routing at the same cost (``router_frontier.py``): against random routing
    with the head's own SEARCH : CALCULATE split (``OWN_SPLIT``) where the file has it, else — in files written before
    that baseline existed — against random routing with SEARCH as its only tool route (``SEARCH_ONLY``); ``versus``
    names which, and the table marks the latter. Returns ``{"mean", "se", "t", "versus"}``; ``t`` is None when the
    standard error is 0.

    Raises: KeyError: neither baseline is in the point (names ``where``)."""
    for key in (OWN_SPLIT, SEARCH_ONLY):
        if key in point:
            gain = _need(point[key], "score", f"{where}:{key}")
            se = gain["se"]
            return {"mean": gain["mean"], "se": se, "t": gain["mean"] / se if se else None, "versus": key}
    raise KeyError(f"does_it_learn_summary: {where} has neither {OWN_SPLIT} nor {SEARCH_ONLY}")


def last_third(progress: dict, phase: int = 0, where: str = "progress file") -> dict:
    """Budget, the routing policy's expected tool cost over the last third of training, λ at the end, and the phase's
    number of steps, median ``timing_s/step`` and their sum in hours (validations not included), for budget phase
    ``phase`` of a router run's progress file (a run resumed with another ``router.budget_B`` has one phase per
    budget in ``budget_phases``; a file without it is one phase, its ``last_third``, whose ``policy_cost`` is read —
    never its ``mean_cost``, the cost of all three stratified route copies).

    Raises: KeyError: no such phase, no ``policy_cost``, or no λ logged at the phase's last step (names ``where``)."""
    if "budget_phases" in progress:
        phases = progress["budget_phases"]
        if phase >= len(phases):
            raise KeyError(f"does_it_learn_summary: {where} has {len(phases)} budget phase(s), not {phase + 1}")
        cost, budget = phases[phase]["last_third_cost"], phases[phase]["budget"]
        first, end = phases[phase]["steps"]
    else:
        third = _need(progress, "last_third", where)
        cost, budget = _need(third, "policy_cost", f"{where}:last_third"), third["budget"]
        first, end = 1, third["steps"][1]
    steps = [s for s in progress.get("train_steps", []) if first <= s.get("step", 0) <= end]
    lam = [s["router/lambda"] for s in steps if s["step"] == end and "router/lambda" in s]
    if not lam:
        raise KeyError(f"does_it_learn_summary: {where} logs no router/lambda at step {end}")
    seconds = sorted(s["timing_s/step"] for s in steps if "timing_s/step" in s)
    return {
        "budget": budget,
        "policy_cost_last_third": cost,
        "last_step": end,
        "final_lambda": lam[0],
        "steps": end - first + 1,
        "median_step_s": statistics.median(seconds) if seconds else None,
        "step_hours": sum(seconds) / 3600 if seconds else None,
    }


def summarise(results: Path = RESULTS) -> dict:
    """Everything the table and the figure show, from the files in ``results``. A frontier file without a
    ``benchmark`` key predates BFCL scoring and is of RLLA's reward."""
    load = functools.cache(lambda name: _load(name, results))  # a file serves several rows: read it once
    heads = []
    for item, label, actor, (progress, phase), samples in HEADS:
        entry = {
            "item": item,
            "label": label,
            "actor": actor,
            "training": last_third(load(progress), phase, progress),
            "samples": [],
        }
        for sample, kind, name, key in samples:
            if kind not in KINDS:
                raise ValueError(f"does_it_learn_summary: item {item}, '{sample}': kind {kind!r} is not one of {KINDS}")
            frontier = load(name)
            where = f"{name}:{key}"
            point = _need(_need(frontier, "points", name), key, name)
            n1, f1, n0, f0 = _tool_groups(point)
            f1_policy, f1_random = expected_decision_f1(point)
            entry["samples"].append(
                {
                    "sample": sample,
                    "kind": kind,
                    "file": name,
                    "point": key,
                    "benchmark": frontier.get("benchmark", "rlla"),
                    "budget": _need(frontier, "budget", name),
                    "rows": _need(point, "rows", where),
                    "cost": _need(point, "mean_cost", where),
                    "score": _need(point, "score", where),
                    "gain_vs_random_same_cost": head_gain(point, where),
                    "ground_truth_call": {"rows": n1, "tool_route_frac": f1},
                    "ground_truth_no_call": {"rows": n0, "tool_route_frac": f0},
                    "decision_f1": f1_policy,
                    "decision_f1_random_same_rate": f1_random,
                }
            )
        heads.append(entry)
    grpo = []
    for label, name, decoding, metric, note in GRPO:
        run = next((f for prefix, f in GRPO_RUNS.items() if label.startswith(prefix)), None)
        if run is None:
            raise KeyError(f"does_it_learn_summary: no progress file in GRPO_RUNS for the run '{label}'")
        cost = _need(load(run), "cost", run)
        paired = load(name)
        block = _need(paired, "paired" if metric == "bfcl_accuracy" else "prompt<=1024", name)
        m = _need(_need(block, "metrics", name), metric, name)
        grpo.append(
            {
                "run": label,
                "decoding": decoding,
                "metric": metric,
                "note": note,
                "file": name,
                "prompts": m["n"],
                "before": m["before"],
                "after": m["after"],
                "gain": m["gain"],
                "se": m["se"],
                "t": m["t"],
                "run_progress": run,
                "run_steps": cost["steps_timed"],
                "run_median_step_s": cost["median_step_s"],
            }
        )
    baselines = {}
    for actor, name in ACTOR_BASELINES.items():
        points = _need(load(name), "points", name)
        baselines[actor] = {
            k: {"cost": _need(points, k, name)["mean_cost"], "score": points[k]["score"]["mean"]}
            for k in ("answer", "search", "calculate")
        }
    fixed = [
        {"item": item, "point": key, "cost": p["mean_cost"], "score": p["score"]["mean"]}
        for item, name, key in FIXED_PRICE
        for p in [_need(load(name)["points"], key, name)]
    ]
    return {
        "issue": "19: the router heads and GRPO runs of README 'Does it learn?' at a glance",
        "heads": heads,
        "fixed_price": fixed,
        "actor_baselines_rlla_val": baselines,
        "grpo": grpo,
    }


def _t(value) -> str:
    return "–" if value is None else f"{value:.1f}"


def _f(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(summary: dict) -> str:
    """Two markdown tables: router heads (one row per sample) and GRPO comparisons. Bold: a gain above zero by more
    than two standard errors; †: against random routing with SEARCH as its only tool route (``head_gain``)."""
    lines = [
        "| item | head | trained: policy cost in the last third / B, final λ; steps × median s | sample | prompts | "
        "cost | score | "
        "gain over random at the same cost (t) | P(tool route): ground truth calls / does not (prompts) | "
        "decision F1 (random at the same rate) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for head in summary["heads"]:
        tr = head["training"]
        trained = (
            f"{tr['policy_cost_last_third']:.3f} / {tr['budget']}, λ {tr['final_lambda']:.2f}; "
            f"{tr['steps']} × {_f(tr['median_step_s'], 0)} s"
        )
        for i, s in enumerate(head["samples"]):
            g = s["gain_vs_random_same_cost"]
            bold = "**" if g["t"] is not None and g["t"] > 2 else ""
            dagger = "†" if g["versus"] == SEARCH_ONLY else ""
            no_call = s["ground_truth_no_call"]
            lines.append(
                f"| {head['item'] if i == 0 else ''} | {head['label'] if i == 0 else ''} | "
                f"{trained if i == 0 else ''} | {s['sample']} | {s['rows']} | {s['cost']:.2f} | "
                f"{s['score']['mean']:.3f} | {bold}{g['mean']:+.3f} ± {g['se']:.3f} ({_t(g['t'])}){bold}{dagger} | "
                f"{s['ground_truth_call']['tool_route_frac']:.2f} / "
                f"{_f(no_call['tool_route_frac']) if no_call['rows'] else '–'} ({no_call['rows']}) | "
                f"{_f(s['decision_f1'])} ({_f(s['decision_f1_random_same_rate'])}) |"
            )
    lines += [
        "",
        "| GRPO run (from smollm2-135m-sft) | its training: steps × median s | decoding | metric | prompts | "
        "before → after | paired gain ± se (t) | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["grpo"]:
        bold = "**" if r["t"] is not None and r["t"] > 2 else ""
        lines.append(
            f"| {r['run']} | {r['run_steps']} × {r['run_median_step_s']:.0f} s | {r['decoding']} | "
            f"{r['metric']} | {r['prompts']} | {r['before']:.3f} → "
            f"{r['after']:.3f} | {bold}{r['gain']:+.3f} ± {r['se']:.3f} ({_f(r['t'])}){bold} | {r['note']} |"
        )
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
        ax.plot(
            [0, 1],
            [base["answer"]["score"], tool],
            ls="--",
            color=c,
            alpha=0.5,
            label=f"{names[actor]}: random routing at any cost (even SEARCH : CALCULATE split)",
        )
        ax.scatter(
            [0, 1, 1],
            [base["answer"]["score"], base["search"]["score"], base["calculate"]["score"]],
            marker="s",
            color=c,
            alpha=0.6,
        )
    palette = dict(
        zip(
            [h["item"] for h in summary["heads"]],  # the actors' blue and red are left out
            ["tab:olive", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:cyan"],
        )
    )
    for head in summary["heads"]:
        for s in head["samples"]:
            if s["kind"] == "rlla63":
                repriced = s["point"] == "learned_calibrated_expected"
                ax.errorbar(
                    s["cost"],
                    s["score"]["mean"],
                    yerr=s["score"]["se"],
                    capsize=3,
                    fmt="D" if head["actor"] == "grpo" else "o",
                    color=palette[head["item"]],
                    mfc="white" if repriced else None,
                    label=f"{head['item']}: {head['label']}{', re-priced to 0.3' if repriced else ''}",
                )
    for f in summary["fixed_price"]:
        lam = f["point"].split("_")[1]
        ax.scatter(
            f["cost"],
            f["score"],
            marker="^" if float(lam) < 4 else "v",
            color=palette[f["item"]],
            label=f"{f['item']} at the fixed price λ = {lam}",
        )
    ax.axvline(0.3, color="grey", lw=0.8)
    ax.set_xlabel("mean route cost (tool routes cost ~1)")
    ax.set_ylabel("RLLA score, 63 validation prompts ≤ 1,024 tokens")
    ax.set_title(
        "(a) routing policies on RLLA validation (±1 se)\n■ never / always a tool; ● on the SFT actor, "
        "◆ on the GRPO actor",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1)

    ax = axes[1]
    rows = [
        (f"{h['item']}: {s['sample']} (cost {s['cost']:.2f})", s["gain_vs_random_same_cost"], s["kind"])
        for h in summary["heads"]
        for s in h["samples"]
    ]
    kind_colour = {
        "rlla63": "tab:blue",
        "rlla33": "tab:cyan",
        "rlla_irrel": "tab:orange",
        "bfcl": "tab:green",
        "api_bank": "tab:purple",
    }
    for y, (label, g, kind) in enumerate(reversed(rows)):
        t = g["t"] if g["t"] is not None else 0.0
        ax.scatter(
            t,
            y,
            marker="s" if g["versus"] == SEARCH_ONLY else "o",
            color=kind_colour[kind],
            facecolors=kind_colour[kind] if t > 2 else "white",
        )
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=7)
    ax.axvline(0, color="black", lw=0.8)
    ax.axvline(2, color="grey", lw=0.8, ls="--")
    ax.set_xlabel(
        "paired t of the gain over random routing at the same cost (gain / se; filled: t > 2)\n"
        "blue: RLLA validation, cyan: its 33 prompts ≤ 768 tokens, orange: with its irrelevance rows,\n"
        "green: BFCL accuracy, purple: API-Bank;\n"
        "■: against random with SEARCH only, ●: with the head's own SEARCH : CALCULATE split"
    )
    ax.set_title("(b) does the router pay for itself?", fontsize=10)

    ax = axes[2]
    grpo = [r for r in summary["grpo"] if r["metric"] == "correctness"]
    for y, r in enumerate(reversed(grpo)):
        passed = r["t"] is not None and abs(r["t"]) > 2
        ax.errorbar(
            r["gain"], y, xerr=2 * r["se"], fmt="o", capsize=3, color="tab:orange", mfc=None if passed else "white"
        )
    ax.set_yticks(range(len(grpo)), [f"{r['run']}: {r['decoding']}" for r in reversed(grpo)], fontsize=7)
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
    given = (
        ([f"--results {args.results}"] if args.results != str(RESULTS) else [])
        + [f"--output {args.output}"]
        + [f"--{k} {getattr(args, k)}" for k in ("plot", "markdown") if getattr(args, k)]
    )
    summary["command"] = " ".join(["python experiments/scripts/does_it_learn_summary.py", *given])
    Path(args.output).write_text(json.dumps(summary, indent=1) + "\n")
    table = markdown(summary)
    if args.markdown:
        Path(args.markdown).write_text(table)
    if args.plot:
        plot(summary, args.plot)
    print(table)


if __name__ == "__main__":
    main()
