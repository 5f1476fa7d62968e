"""Cost–accuracy points of routing policies on the same prompts (issue 19 §3.4), and the plot.

    python experiments/scripts/router_frontier.py --budget 0.3 --reference random_0.3 \
        --output experiments/runs/ID/X.json --plot experiments/runs/ID/X.png \
        learned=outputs/eval/X/learned.jsonl answer=outputs/eval/X/answer.jsonl ...

Each ``LABEL=FILE`` is a ``python -m verl.router.infer`` output (one greedy response per prompt, with its ``route``).
Per policy: the mean tool cost (``router.cost_weights`` defaults: 1 for a response that calls any tool — the training
cost), the RLLA reward's score / format / correctness (``main_eval.row_metrics``) with standard errors, the exact
tool-call match, the share of tool routes (SEARCH/CALCULATE) among the prompts whose ground truth calls a tool and among
those whose ground truth does not, the tool-cost block of every evaluation summary (``tool_cost``: calls per prompt,
tool-use rate, call/no-call decision F1, tool productivity with the exact match as "correct"; for a policy scored
in expectation, on expected counts), and — against ``--reference`` (a label) — the paired per-prompt gains
(``eval_compare.paired_comparison``).

``--benchmark bfcl`` scores generations of BFCL rows (prompts from ``verl.utils.dataset.bfcl.write_bfcl_parquet``,
whose ``bfcl_id`` / ``bfcl_category`` the router-infer output carries) with BFCL's own checker instead
(``eval_bfcl.check_bfcl_rows``): the one metric is ``score`` = BFCL accuracy (1 right, 0 wrong), a prompt "calls a
tool" in its ground truth unless its category is an irrelevance category, "correct" in ``tool_cost`` is BFCL's
verdict (its calls and cost are the training cost's parse of the response, as for RLLA), the pairing against
``--reference`` is per prompt over that accuracy (overall and per category, the same BFCL ids required), and a head's
tool-route probability is also reported per category.

The plot puts every policy at (mean tool cost, mean score) with ±1 standard error, the budget as a vertical line, and
the segment from ``answer`` to ``search`` (where random routing at any rate lies in expectation: the fixed policies'
frontier a learned router has to beat).
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from pathlib import Path

from verl.router import ROUTE_NAMES
from verl.router.cost import batch_tool_usage, trajectory_cost
from verl.trainer.eval_bfcl import check_bfcl_rows
from verl.trainer.eval_compare import paired_comparison, row_key
from verl.trainer.main_eval import read_generations, row_metrics
from verl.trainer.tool_cost import expected_tool_cost_metrics, tool_cost_metrics
from verl.utils.dataset.bfcl import IRRELEVANCE_CATEGORIES
from verl.utils.reward_score.rlla import RewardSwitches

ROUTES = ROUTE_NAMES  # ("ANSWER", "SEARCH", "CALCULATE"): the order of router_probs rows as tensors
METRICS = ("score", "format", "correctness", "exact_match")  # the RLLA reward's parts and the exact tool-call match
BFCL_METRICS = ("score",)  # BFCL accuracy


def _mean_se(values: list[float]) -> dict:
    n = len(values)
    mean = sum(values) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else None
    return {"mean": mean, "se": se}


def group_stats(values: list[float]) -> dict:
    """``{"n", "mean", "var"}`` of one group (sample variance; None where undefined): enough to pool groups exactly."""
    n = len(values)
    mean = sum(values) / n if n else None
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else None
    return {"n": n, "mean": mean, "var": var}


def gap(no_call: dict, call: dict) -> dict:
    """``mean(no_call) − mean(call)`` of two :func:`group_stats` with Welch's standard error ``sqrt(var_a/n_a +
    var_b/n_b)`` (None with fewer than two values in a group): how much less often a policy takes a tool route on the
    prompts whose ground truth calls no tool than on those that call one. The groups are kept in the result."""
    diff = no_call["mean"] - call["mean"] if no_call["n"] and call["n"] else None
    se = (
        math.sqrt(no_call["var"] / no_call["n"] + call["var"] / call["n"])
        if no_call["var"] is not None and call["var"] is not None
        else None
    )
    return {"no_call_minus_call": diff, "se": se, "no_call": no_call, "call": call}


def needs_tool(row: dict) -> bool:
    """Whether the ground truth of a generation row calls a tool: a BFCL row (``bfcl_category``) unless its category
    is an irrelevance one, an RLLA row when its ground truth holds ``<tool_call>``."""
    if "bfcl_category" in row:
        return row["bfcl_category"] not in IRRELEVANCE_CATEGORIES
    return "<tool_call>" in (row.get("ground_truth") or "")


def _correct_metric(metrics: tuple) -> str:
    """The metric whose value > 0 makes a response "correct" in ``tool_cost``: the exact match (RLLA), or the first
    metric where there is none (BFCL accuracy)."""
    return "exact_match" if "exact_match" in metrics else metrics[0]


def policy_point(rows: list[dict], values: dict[tuple, dict], metrics: tuple = METRICS) -> dict:
    """The figures of one policy's generation rows (see the module docstring); ``values`` is
    :func:`per_row_values` of the same rows; ``tool_cost`` counts a response as correct by its ``exact_match``
    (RLLA) or, where ``metrics`` has none, by the first metric (BFCL accuracy)."""
    per_row = [values[row_key(r)] for r in rows]
    needs = [needs_tool(r) for r in rows]
    correct = _correct_metric(metrics)
    tool_route = [r["route"] != "ANSWER" for r in rows]

    def share(flag: bool) -> dict:
        picked = [t for t, n in zip(tool_route, needs) if n == flag]
        return {"rows": len(picked), "tool_route_frac": sum(picked) / len(picked) if picked else None}

    return {
        "rows": len(rows),
        "mean_cost": sum(v["cost"] for v in per_row) / len(per_row),
        "routes": {name: sum(r["route"] == name for r in rows) for name in ("ANSWER", "SEARCH", "CALCULATE")},
        **{m: _mean_se([v[m] for v in per_row]) for m in metrics},
        "ground_truth_calls_a_tool": share(True),
        "ground_truth_calls_no_tool": share(False),
        "tool_cost": tool_cost_metrics(
            [v["num_calls"] for v in per_row],
            needs,
            [v[correct] > 0 for v in per_row],
            made_call=[v["made_call"] for v in per_row],
        ),
    }


def per_row_values(rows: list[dict], switches: RewardSwitches, benchmark: str = "rlla") -> dict[tuple, dict]:
    """``{row_key: {"cost", "num_calls", "made_call", metrics...}}`` of one file's generations: the training cost of
    each response (``router.cost_weights`` defaults) and, for ``benchmark="rlla"``, the RLLA reward's score / format /
    correctness and the exact match (``main_eval.row_metrics``), for ``"bfcl"`` the BFCL accuracy as ``score``.

    Raises:
        ValueError: an unknown ``benchmark``; BFCL rows without ``bfcl_id`` / ``bfcl_category`` (``check_bfcl_rows``).
    """
    if benchmark == "rlla":
        scored = [row_metrics(r, switches) for r in rows]
    elif benchmark == "bfcl":
        scored = [{"score": float(v["valid"])} for v in check_bfcl_rows(rows)]
    else:
        raise ValueError(f"benchmark {benchmark!r}: expected 'rlla' or 'bfcl'")
    usage = batch_tool_usage([r["response"] for r in rows], [{} for _ in rows])
    cost = trajectory_cost(usage["used_any_tool"], usage["used_search"], usage["used_calculate"], usage["num_calls"])
    return {
        row_key(r): {"cost": float(c), "num_calls": int(n), "made_call": bool(m), **v}
        for r, v, c, n, m in zip(
            rows, scored, cost.tolist(), usage["num_calls"].tolist(), usage["used_any_tool"].tolist()
        )
    }


def _tool_route_prob(pi: dict) -> float:
    """P(SEARCH) + P(CALCULATE) of one prompt's routing probabilities ``{route name: probability}``."""
    return pi.get("SEARCH", 0.0) + pi.get("CALCULATE", 0.0)


def expected_point(
    probs: dict[tuple, dict],
    route_values: dict[str, dict[tuple, dict]],
    needs_tool: dict[tuple, bool],
    metrics: tuple = METRICS,
    groups: dict | None = None,
) -> dict:
    """A stochastic routing policy scored exactly in expectation over its routes: decoding is greedy, so a prompt's
    response under each route is fixed (the ``answer`` / ``search`` / ``calculate`` generations), and per prompt
    ``E[x] = Σ_a π(a)·x(a)`` for the cost and every metric; means and standard errors are over prompts.

    Args: ``probs`` {row_key: {route name: probability}}; ``route_values`` {route name: :func:`per_row_values`};
        ``needs_tool`` {row_key: the ground truth calls a tool}; ``metrics`` the metric names of the values;
        ``groups`` {row_key: group name} (e.g. the BFCL category), or None.
    Returns: the fields of :func:`policy_point` (``routes`` holds expected counts), the difference of the mean
        tool-route probability between prompts whose ground truth calls no tool and those that call one with its
        Welch standard error (:func:`gap`, ``tool_route_frac_gap``), the tool-route share split by whether a tool
        pays on the prompt in hindsight (``tool_pays``: the better tool route's greedy response scores above the
        ANSWER route's; ``tool_does_not_pay``), with ``groups`` the mean tool-route probability per group
        (``tool_route_frac_by_group``), the tool-cost block on expected counts
        (``verl.trainer.tool_cost.expected_tool_cost_metrics``: a response's calls as the training cost parses them,
        "correct" as in :func:`policy_point`), plus ``per_prompt`` values for paired comparisons.
    """
    keys = sorted(probs)
    correct = _correct_metric(metrics)
    # per prompt, E[x] = Σ_a π(a)·x(a) of each value of its fixed response under each route: the cost and the
    # metrics, and for the tool-cost block the calls, P(call) and P(correct)
    expected = {name: [] for name in ("cost", *metrics, "num_calls", "made_call", "correct")}
    tool_share = {True: [], False: []}
    pays_share = {True: [], False: []}
    for key in keys:
        pi = probs[key]
        routed = [
            (pi[a], {**route_values[a][key], "correct": route_values[a][key][correct] > 0})
            for a in ROUTES
            if pi.get(a, 0.0)
        ]
        for name, column in expected.items():
            column.append(sum(p * float(v[name]) for p, v in routed))
        tool_p = _tool_route_prob(pi)
        tool_share[needs_tool[key]].append(tool_p)
        best_tool = max(route_values["SEARCH"][key]["score"], route_values["CALCULATE"][key]["score"])
        pays_share[best_tool > route_values["ANSWER"][key]["score"]].append(tool_p)

    def share(picked: list[float]) -> dict:
        return {"rows": len(picked), "tool_route_frac": sum(picked) / len(picked) if picked else None}

    by_group: dict = {}
    for key in keys if groups else ():
        by_group.setdefault(groups[key], []).append(_tool_route_prob(probs[key]))
    per_prompt = {m: expected[m] for m in ("cost", *metrics)}
    return {
        "rows": len(keys),
        "mean_cost": sum(per_prompt["cost"]) / len(keys),
        **({"tool_route_frac_by_group": {g: sum(v) / len(v) for g, v in by_group.items()}} if groups else {}),
        "routes": {a: sum(probs[k].get(a, 0.0) for k in keys) for a in ROUTES},
        **{m: _mean_se(per_prompt[m]) for m in metrics},
        "ground_truth_calls_a_tool": share(tool_share[True]),
        "ground_truth_calls_no_tool": share(tool_share[False]),
        "tool_route_frac_gap": gap(group_stats(tool_share[False]), group_stats(tool_share[True])),
        "tool_pays": share(pays_share[True]),
        "tool_does_not_pay": share(pays_share[False]),
        "tool_cost": expected_tool_cost_metrics(
            expected["num_calls"], [needs_tool[k] for k in keys], expected["correct"], expected["made_call"]
        ),
        "per_prompt": {m: dict(zip(map(str, keys), v)) for m, v in per_prompt.items()},
    }


def paired_expected(base: dict, other: dict, metrics: tuple = METRICS) -> dict:
    """Per-prompt gains of ``other`` over ``base`` (two :func:`expected_point` results): mean ± se per metric."""
    out = {}
    for m in metrics:
        diffs = [other["per_prompt"][m][k] - base["per_prompt"][m][k] for k in base["per_prompt"][m]]
        out[m] = _mean_se(diffs)
    return out


def calibrated_probs(
    checkpoint: str, table: list[dict], calibrate_on: list[dict], budget: float
) -> tuple[dict[tuple, dict], dict]:
    """A ``router.loss_mode=value`` head re-priced for these prompts: λ set, from the routing probabilities of the
    ``calibrate_on`` rows alone (no label, no generation), so that the head's stochastic policy spends ``budget`` in
    mean route cost ``c̄`` over them (``verl.router.value.lambda_for_cost``), then ``table``'s probabilities moved to
    that λ (``reprice_probs``). Scored in expectation, as the frontier scores the head's policy.

    Args:
        checkpoint: the ``global_step_N`` both files were routed with (its ``c̄``, τ and λ); nothing in the rows
            names it, so a file of another checkpoint is not caught.
        table, calibrate_on: router-infer rows (``router_probs``, and ``router_lambda``: the price they were
            computed at; a row written before that field is read at the checkpoint's λ, with a warning, which is
            wrong for a ``--fixed_lambda`` file of that time).
        budget: the target mean route cost (``c̄`` units: the training batches' cost per route).

    Returns: ``({row_key: {route: probability}}, info)`` with ``info`` = the λ found, the checkpoint's λ, ``c̄``,
        ``τ``, the mean route cost ``c̄`` spent over ``table`` and over ``calibrate_on`` at that λ, and how many rows
        recorded no price.
    Raises: SystemExit: the checkpoint's head is not a value head, or the rows record several prices.
    """
    import sys

    import torch

    from verl.router.checkpoint import load_checkpoint_config, load_value_policy, resolve_checkpoint
    from verl.router.value import lambda_for_cost, mean_route_cost, reprice_probs

    files = resolve_checkpoint(checkpoint)
    policy = load_value_policy(files.step_dir, load_checkpoint_config(files.config_file).router)
    if policy is None:
        raise SystemExit(f"--calibrate {checkpoint}: the head is not a router.loss_mode=value head (no price to set)")
    _, cost, checkpoint_lambda, temperature = policy
    unpriced = 0

    def recorded(rows: list[dict]) -> tuple[torch.Tensor, float]:
        nonlocal unpriced
        unpriced += sum("router_lambda" not in r for r in rows)
        prices = {float(r.get("router_lambda", checkpoint_lambda)) for r in rows}
        if len(prices) != 1:
            raise SystemExit(f"--calibrate: the rows record several prices {sorted(prices)}")
        return torch.tensor([[r["router_probs"][a] for a in ROUTES] for r in rows], dtype=torch.float64), prices.pop()

    probs_on, lam_on = recorded(calibrate_on)
    probs, lam_table = recorded(table)
    if unpriced:
        print(
            f"router_frontier: {unpriced} rows record no router_lambda (written before it existed): read at the "
            f"checkpoint's λ = {checkpoint_lambda:.4f}",
            file=sys.stderr,
        )
    lam = lambda_for_cost(probs_on, cost, lam_on, temperature, budget)
    repriced = reprice_probs(probs, cost, lam_table, lam, temperature)
    info = {
        "lambda": lam,
        "checkpoint_lambda": checkpoint_lambda,
        "route_cost": cost.tolist(),
        "temperature": temperature,
        "route_cost_spent": mean_route_cost(probs, cost, lam_table, lam, temperature),
        "route_cost_spent_on_calibration_rows": mean_route_cost(probs_on, cost, lam_on, lam, temperature),
        "calibration_rows": len(calibrate_on),
        "rows_without_router_lambda": unpriced,
    }
    return {row_key(r): dict(zip(ROUTES, p.tolist())) for r, p in zip(table, repriced)}, info


SWEEP_PREFIX = "lambda_"  # --policy labels drawn as one curve: the same value head at several fixed prices


def _restrict(point: dict, keys: list[tuple]) -> dict:
    """The ``per_prompt`` values of an :func:`expected_point` result on ``keys`` only (for :func:`paired_expected`)."""
    return {"per_prompt": {m: {str(k): v[str(k)] for k in keys} for m, v in point["per_prompt"].items()}}


def score_in_expectation(
    probs: dict[tuple, dict],
    values: dict,
    needs: dict,
    random_b: dict,
    metrics: tuple = METRICS,
    groups: dict | None = None,
    split_at_row: int | None = None,
) -> tuple[dict, dict]:
    """A stochastic routing policy (``probs``) in expectation (:func:`expected_point`), paired against random routing
    at the budget's rate (``random_b``) and at the policy's own expected cost — with the SEARCH route for every tool
    call, and with the policy's own SEARCH : CALCULATE split (``search_share``), which leaves only the choice of
    whether to call. Returns ``(point, matched random point)``; the point holds ``paired_vs_random_expected``,
    ``paired_vs_random_same_cost_expected`` and ``paired_vs_random_same_cost_same_split_expected``. With
    ``split_at_row`` = N it also holds ``..._same_split_expected_by_rows``: the same per-prompt pairs (the random
    policy is the whole sample's) averaged separately over the prompts at file rows < N and >= N, each part with its
    number of prompts and mean tool-route probability (e.g. N = 80: RLLA's validation rows and the irrelevance rows
    ``verl.router.irrelevance`` appends after them)."""
    learned = expected_point(probs, values, needs, metrics, groups)
    learned["paired_vs_random_expected"] = paired_expected(random_b, learned, metrics)
    # random routing at the policy's own expected cost (the SEARCH route's responses need not all call a tool: the
    # rate is the policy's cost over the SEARCH route's mean cost): the same spending, no choice of where
    search_cost = sum(v["cost"] for v in values["SEARCH"].values()) / len(values["SEARCH"])
    rate = min(1.0, learned["mean_cost"] / search_cost) if search_cost else 0.0
    matched = expected_point({k: {"ANSWER": 1 - rate, "SEARCH": rate} for k in needs}, values, needs, metrics)
    learned["paired_vs_random_same_cost_expected"] = paired_expected(matched, learned, metrics)
    # ... and with the policy's own split between the two tool routes (where one tool route's prompt rewrite serves
    # the actor better than the other's, choosing it is not choosing *whether* to call): the decision alone
    tool_mass = {a: sum(probs[k].get(a, 0.0) for k in needs) for a in ("SEARCH", "CALCULATE")}
    split = tool_mass["SEARCH"] / (tool_mass["SEARCH"] + tool_mass["CALCULATE"]) if sum(tool_mass.values()) else 1.0
    mixed_cost = sum(
        split * values["SEARCH"][k]["cost"] + (1 - split) * values["CALCULATE"][k]["cost"] for k in needs
    ) / len(needs)
    rate_split = min(1.0, learned["mean_cost"] / mixed_cost) if mixed_cost else 0.0
    same_split = expected_point(
        {
            k: {"ANSWER": 1 - rate_split, "SEARCH": rate_split * split, "CALCULATE": rate_split * (1 - split)}
            for k in needs
        },
        values,
        needs,
        metrics,
    )
    learned["paired_vs_random_same_cost_same_split_expected"] = {
        "search_share": split,
        "rate": rate_split,
        **paired_expected(same_split, learned, metrics),
    }
    if split_at_row is not None:
        parts = {
            f"rows < {split_at_row}": [k for k in sorted(needs) if k[1] < split_at_row],
            f"rows >= {split_at_row}": [k for k in sorted(needs) if k[1] >= split_at_row],
        }
        learned["paired_vs_random_same_cost_same_split_expected_by_rows"] = {
            name: {
                "rows": len(keys),
                "tool_route_frac": sum(_tool_route_prob(probs[k]) for k in keys) / len(keys),
                **paired_expected(_restrict(same_split, keys), _restrict(learned, keys), metrics),
            }
            for name, keys in parts.items()
            if keys
        }
    learned.pop("per_prompt")
    matched.pop("per_prompt")
    return learned, {"rate": rate, **matched}


def label_offsets(
    places: dict, to_display, points_per_pixel: float, height: float = 10.0, char_width: float = 4.8
) -> list[tuple[tuple, str, tuple[float, float]]]:
    """Where to put each point's label so that no two overlap: ``[((x, y), text, (dx, dy) in points)]``.

    Labels start 5 points right of their point and 5 above it; taken from left to right (then bottom to top), a
    label whose box (``char_width`` points a character, ``height`` points high, 8-point text) meets a box already
    placed takes the nearest free line below or above, alternately. ``places`` maps ``(x, y)`` in data units to the labels of the
    policies there; ``to_display`` maps ``[N, 2]`` data points to pixels (``ax.transData.transform``)."""
    placed: list[tuple[float, float, float]] = []  # left, bottom, width of each box, in points
    out = []
    for (x, y), labels in sorted(places.items()):
        text = " = ".join(labels)
        px, py = (float(v) * points_per_pixel for v in to_display([(x, y)])[0])
        width = char_width * len(text)
        for step in range(2 * len(places) + 1):  # 5, 5 − h, 5 + h, 5 − 2h, ...: one of them is free
            dy = 5.0 + (-1) ** step * ((step + 1) // 2) * height
            if not any(
                px + 5 < left + w and left < px + 5 + width and abs(py + dy - bottom) < height
                for left, bottom, w in placed
            ):
                break
        placed.append((px + 5, py + dy, width))
        out.append(((x, y), text, (5.0, dy)))
    return out


def plot(points: dict, budget: float, path: str, title: str, ylabel: str = "RLLA score") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    sweep = sorted(
        (p["mean_cost"], p["score"]["mean"]) for label, p in points.items() if label.startswith(SWEEP_PREFIX)
    )
    if sweep:  # one value head at several fixed prices (--policy lambda_L=...): its own cost–reward curve
        ax.plot(
            [c for c, _ in sweep],
            [v for _, v in sweep],
            "x-",
            color="tab:green",
            linewidth=1,
            label="the learned head at fixed λ (expected)",
        )
    places: dict = {}  # policies at the same point share one marker and one label ("learned = search")
    for label, point in points.items():
        if label.startswith(SWEEP_PREFIX):
            continue
        places.setdefault((round(point["mean_cost"], 4), round(point["score"]["mean"], 4)), []).append(label)
    colors = {}
    for (x, y), labels in places.items():
        colors[(x, y)] = (
            ax.errorbar(x, y, yerr=points[labels[0]]["score"]["se"] or 0, fmt="o", capsize=3).lines[0].get_color()
        )
    if "answer" in points and "search" in points:  # random routing at every rate p mixes the two: this segment
        ends = [points["answer"], points["search"]]
        ax.plot(
            [e["mean_cost"] for e in ends],
            [e["score"]["mean"] for e in ends],
            color="lightgrey",
            zorder=0,
            label="random routes at any rate (expected)",
        )
    if sweep or ("answer" in points and "search" in points):
        ax.legend(loc="best", fontsize=8)
    ax.set_xlim(-0.05, 1.3)  # room for the labels right of the points
    ax.axvline(budget, color="grey", linestyle="--", linewidth=1)
    ax.text(budget, ax.get_ylim()[0], f" B = {budget}", color="grey", va="bottom")
    ax.set_xlabel("mean tool cost (share of responses that call a tool)")
    ax.set_ylabel(f"{ylabel} (mean ± 1 se)")
    ax.set_title(textwrap.fill(title, 80), fontsize=9)
    fig.tight_layout()
    fig.canvas.draw()  # the final axes, so that labels are placed apart in the saved figure's coordinates
    for (x, y), text, offset in label_offsets(places, ax.transData.transform, 72.0 / fig.dpi):
        ax.annotate(
            text,
            (x, y),
            textcoords="offset points",
            xytext=offset,
            fontsize=8,
            color=colors[(x, y)],
            va="center",
            arrowprops=None if offset[1] == 5.0 else {"arrowstyle": "-", "color": colors[(x, y)], "linewidth": 0.5},
        )
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("points", nargs="+", help="LABEL=router-infer JSONL")
    parser.add_argument("--budget", type=float, required=True)
    parser.add_argument("--reference", default=None, help="label the others are paired against")
    parser.add_argument("--output", required=True)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--title", default="routing policies on the same prompts")
    parser.add_argument("--command", default=None, help="the command that made the generations (recorded)")
    parser.add_argument(
        "--benchmark",
        choices=("rlla", "bfcl"),
        default="rlla",
        help="how a response is scored: the RLLA reward (default) or BFCL's checker (BFCL rows)",
    )
    parser.add_argument(
        "--expected",
        default=None,
        help="label of the learned head's generations (or of a --policy): also score its stochastic "
        "policy exactly in expectation (needs the answer, search and calculate labels), as "
        "'LABEL_expected', paired against random routing at the budget's rate and at its own "
        "cost in expectation, the latter also written as 'random_same_cost_expected'",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        help="LABEL=FILE: a routing policy known only by the router_probs of a router-infer output (e.g. "
        "a value head at a fixed price, --fixed_lambda, generated with --max_new_tokens 1), "
        "scored in expectation as 'LABEL_expected' (needs the answer, search, calculate labels)",
    )
    parser.add_argument(
        "--calibrate",
        default=None,
        metavar="CHECKPOINT",
        help="with --expected, a router.loss_mode=value head (its checkpoint): also score it at the "
        "price that makes its mean route cost c̄ over the prompts of --calibrate_on equal "
        "--budget, set from the prompts alone (no label), as 'LABEL_calibrated_expected'",
    )
    parser.add_argument(
        "--calibrate_on",
        default=None,
        metavar="FILE",
        help="a router-infer output of the same checkpoint whose router_probs set that price "
        "(default: the --expected label's own rows, i.e. these prompts)",
    )
    parser.add_argument(
        "--split_at_row",
        type=int,
        default=None,
        metavar="N",
        help="also report each policy scored in expectation paired against random routing at its cost "
        "(own split) separately on the prompts at file rows < N and >= N (e.g. 80: RLLA's "
        "validation rows and the irrelevance rows appended after them)",
    )
    args = parser.parse_args()
    if (args.calibrate or args.calibrate_on) and not (args.expected and args.calibrate):
        raise SystemExit("--calibrate / --calibrate_on need --expected LABEL and --calibrate CHECKPOINT")
    files = dict(spec.split("=", 1) for spec in args.points)
    rows = {label: read_generations(path) for label, path in files.items()}
    switches = RewardSwitches.from_env()
    metrics = BFCL_METRICS if args.benchmark == "bfcl" else METRICS
    values_of = {
        label: per_row_values(table, switches, args.benchmark)  # scored once per file
        for label, table in rows.items()
    }
    points = {label: policy_point(rows[label], values_of[label], metrics) for label in rows}
    if args.reference:
        if args.reference not in rows:
            raise SystemExit(f"--reference {args.reference!r} is not one of the labels {sorted(rows)}")
        metric = lambda row: row_metrics(row, switches)  # noqa: E731
        for label in rows:
            if label == args.reference:
                continue
            if args.benchmark == "bfcl":  # BFCL's verdicts, paired over the same BFCL ids (and per category)
                scored = {
                    name: [{**r, "_bfcl_score": values_of[name][row_key(r)]["score"]} for r in rows[name]]
                    for name in (args.reference, label)
                }
                points[label][f"paired_vs_{args.reference}"] = paired_comparison(
                    scored[args.reference], scored[label], lambda row: {"score": row["_bfcl_score"]}, bfcl=True
                )
            else:
                points[label][f"paired_vs_{args.reference}"] = paired_comparison(
                    rows[args.reference], rows[label], metric
                )
    policies = dict(spec.split("=", 1) for spec in args.policy)
    if args.expected or policies:
        head = (args.expected,) if args.expected not in (None, *policies) else ()  # its generations are a point
        wanted = ("answer", "search", "calculate") + head
        missing = [label for label in wanted if label not in rows]
        if missing:
            raise SystemExit(f"--expected / --policy need the labels {missing} among the points")
        values = {a: values_of[a.lower()] for a in ROUTES}
        needs = {row_key(r): needs_tool(r) for r in rows["answer"]}
        groups = {row_key(r): r["bfcl_category"] for r in rows["answer"]} if args.benchmark == "bfcl" else None
        b = args.budget
        random_b = expected_point({k: {"ANSWER": 1 - b, "SEARCH": b} for k in needs}, values, needs, metrics)
        probs_of = {label: read_generations(path) for label, path in policies.items()}
        if args.expected and args.expected not in policies:
            probs_of = {args.expected: rows[args.expected], **probs_of}
        for label, table in probs_of.items():
            keys = {row_key(r) for r in table}
            if keys != needs.keys():
                raise SystemExit(
                    f"{label}: its {len(keys)} rows are not the prompts of the route generations "
                    f"({len(needs)} rows; {len(keys - needs.keys())} of its keys are not among them): "
                    "were they made from the same prompts file and prompt-length filter?"
                )
            learned, matched = score_in_expectation(
                {row_key(r): r["router_probs"] for r in table},
                values,
                needs,
                random_b,
                metrics,
                groups,
                args.split_at_row,
            )
            points[f"{label}_expected"] = learned
            if label == args.expected:
                points["random_same_cost_expected"] = matched
        if args.calibrate:
            table = probs_of[args.expected]
            calibrate_on = read_generations(args.calibrate_on) if args.calibrate_on else table
            probs, info = calibrated_probs(args.calibrate, table, calibrate_on, b)
            learned, matched = score_in_expectation(probs, values, needs, random_b, metrics, groups, args.split_at_row)
            points[f"{args.expected}_calibrated_expected"] = {
                "calibration": {**info, "calibrated_on": args.calibrate_on or "these prompts"},
                **learned,
            }
            points["random_same_cost_as_calibrated_expected"] = matched
        random_b.pop("per_prompt")
        points[f"random_{b}_expected"] = random_b
    out = {
        "budget": args.budget,
        "benchmark": args.benchmark,
        "generations": files,
        "command": args.command,
        "points": points,
    }
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    if args.plot:
        plot(points, args.budget, args.plot, args.title, "BFCL accuracy" if args.benchmark == "bfcl" else "RLLA score")
    for label, p in points.items():
        extra = (
            f"  correctness {p['correctness']['mean']:+.2f}  exact {p['exact_match']['mean']:.2f}"
            if "correctness" in p
            else ""
        )
        print(
            f"{label:12s} cost {p['mean_cost']:.2f}  score {p['score']['mean']:+.2f} ± {p['score']['se'] or 0:.2f}"
            f"{extra}  tool routes "
            f"{p['ground_truth_calls_a_tool']['tool_route_frac']} (gt calls) / "
            f"{p['ground_truth_calls_no_tool']['tool_route_frac']} (gt no call)"
            + (
                f" / {p['tool_pays']['tool_route_frac']} where a tool pays ({p['tool_pays']['rows']} prompts), "
                f"{p['tool_does_not_pay']['tool_route_frac']} where not"
                if "tool_pays" in p
                else ""
            )
        )


if __name__ == "__main__":
    main()
