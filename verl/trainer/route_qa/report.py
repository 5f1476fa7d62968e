"""The router's criteria on ``route_qa`` (``docs/route_qa.md`` "Reading a router run"), read off a played test
table, the router's routes on the test questions and, for the budget, its training metrics.

    python -m verl.trainer.route_qa.report --checkpoint CKPT --data_dir DIR --table table.parquet \
        --budget B [--metrics RUN/metrics.jsonl] --output summary.json

``--table`` is :mod:`verl.trainer.route_qa.evaluate`'s output for the same split and model the router routes for
(the value-mode router leaves the actor as it was, so the warm start's table serves its runs). The router's routes
are its greedy routes at the checkpoint's price λ (``verl.router.infer.RouterInference.route``).

Criteria, each with the figures it is read from:

- ``route_shares``: each kind's share of its own route (arithmetic CALCULATE, fact SEARCH, direct ANSWER) is at least
  0.9 and above the bag-of-words baseline's;
- ``payoff``: the router's accuracy minus random routing's at B (``policies.random_at_budget``) is above two paired
  standard errors (random routing at the router's own cost is reported beside it); when the tool routes call tools
  too seldom for random routing to spend B, it does not hold and ``unreachable`` says why;
- ``loose_budget`` (read when B is at least the tool-needing share): the router's accuracy is within one paired
  standard error of always-tools', and its calls per question within 10% of the oracle's (the fewest that answer
  every question that needs a tool); the cut in calls against always-tools is reported;
- ``budget`` (read when ``--metrics`` is given): the policy's expected cost ``router/policy_cost`` averaged over the
  last third of the training steps is within 0.05 of B, and at least 90% of the router's tool use on the test split
  is on questions that need a tool.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from verl.trainer.route_qa import policies
from verl.trainer.route_qa.evaluate import DTYPES, SETTINGS, load_rows
from verl.utils.dataset.route_qa import KINDS, ROUTE_OF_KIND

__all__ = ["criteria", "last_third_mean", "read_table", "router_routes"]


def read_table(path: str | Path, rows: Sequence[dict]) -> dict[str, dict[str, np.ndarray]]:
    """The table written by ``evaluate --output`` back as ``{setting: {column: [N]}}`` in the order of ``rows``.

    Raises:
        ValueError: a setting is missing, or the table's questions are not ``rows``' (named by index).
    """
    import pandas as pd

    frame = pd.read_parquet(path)
    order = [int(r["extra_info"]["index"]) for r in rows]
    table = {}
    for setting in SETTINGS:
        part = frame[frame["setting"] == setting].set_index("index")
        missing = sorted(set(order) - set(part.index))
        if missing:
            raise ValueError(f"{path}: setting {setting} has no row for questions {missing[:5]} (of {len(missing)})")
        part = part.loc[order]
        table[setting] = {k: part[k].to_numpy().astype(dtype) for k, dtype in DTYPES.items()}
    return table


def router_routes(checkpoint: str | Path, rows: Sequence[dict], batch_size: int = 64) -> list[str]:
    """The router's greedy route name per row at the checkpoint's λ (no generation)."""
    from verl.router import RouterAction
    from verl.router.infer import RouterInference

    router = RouterInference(checkpoint, max_new_tokens=1, device="cpu")
    out: list[str] = []
    for lo in range(0, len(rows), batch_size):
        chunk = rows[lo : lo + batch_size]
        routed = router.route([r["prompt"] for r in chunk], [r["extra_info"] for r in chunk])
        out.extend(RouterAction(int(a)).name for a in routed.actions.tolist())
    return out


def last_third_mean(metrics_path: str | Path, key: str = "router/policy_cost") -> float:
    """Mean of ``key`` over the last third of the training steps logged in a ``metrics.jsonl`` (validation lines
    without the key are skipped).

    Raises:
        ValueError: no line holds ``key``.
    """
    values = []
    with open(metrics_path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if key in record:
                values.append((int(record["step"]), float(record[key])))
    if not values:
        raise ValueError(f"{metrics_path}: no step logs {key}")
    values.sort()
    tail = values[len(values) - max(1, len(values) // 3) :]
    return float(np.mean([v for _, v in tail]))


def _compare(table: dict, a: np.ndarray, b: np.ndarray, column: str = "correct") -> dict:
    ea, eb = policies.expected(table, a, column), policies.expected(table, b, column)
    return {"difference": float((ea - eb).mean()), "paired_se": policies.paired_se(ea, eb)}


def _random_or_none(table: dict, budget: float, unreachable: list[str]) -> np.ndarray | None:
    """Random routing at ``budget``, or None (the reason appended to ``unreachable``) when it cannot spend it."""
    try:
        return policies.random_at_budget(table, budget)
    except ValueError as err:
        unreachable.append(str(err))
        return None


def criteria(
    table: dict,
    rows: Sequence[dict],
    routes: Sequence[str],
    train_rows: Sequence[dict],
    budget: float,
    policy_cost_last_third: float | None = None,
) -> dict:
    """Every criterion of the module docstring with its figures (``holds`` per criterion, None where not read)."""
    n = len(rows)
    router = policies.routes_policy(routes)
    summary = {
        "questions": n,
        "budget": budget,
        "tool_share": float(np.mean([bool(r["extra_info"]["needs_tool"]) for r in rows])),
        "router": policies.policy_summary(table, router, rows),
        "oracle": policies.policy_summary(table, policies.oracle(rows), rows),
        "always_tools": policies.policy_summary(table, policies.always("BOTH", n), rows),
        "bag_of_words": policies.policy_summary(table, policies.BagOfWords().fit(train_rows).routes(rows), rows),
    }
    unreachable = []  # budgets random routing cannot spend (its tool routes seldom call a tool)
    random = _random_or_none(table, budget, unreachable)
    at_cost = _random_or_none(table, summary["router"]["cost"], unreachable)
    summary["random_at_budget"] = None if random is None else policies.policy_summary(table, random, rows)
    summary["random_at_router_cost"] = None if at_cost is None else policies.policy_summary(table, at_cost, rows)

    own = {k: summary["router"]["route_shares"][k][ROUTE_OF_KIND[k]] for k in KINDS}
    bow = {k: summary["bag_of_words"]["route_shares"][k][ROUTE_OF_KIND[k]] for k in KINDS}
    out = {"summary": summary}
    out["route_shares"] = {
        "router": own,
        "bag_of_words": bow,
        "holds": all(own[k] >= 0.9 and own[k] > bow[k] for k in KINDS),
    }
    payoff = _compare(table, router, random) if random is not None else {"difference": None, "paired_se": None}
    out["payoff"] = {
        **payoff,
        "against_random_at_router_cost": None if at_cost is None else _compare(table, router, at_cost),
        "holds": False if random is None else payoff["difference"] > 2 * payoff["paired_se"],
        "unreachable": unreachable,
    }
    loose = summary["tool_share"] - 1e-9 <= budget
    against_always = _compare(table, router, policies.always("BOTH", n))
    calls, oracle_calls = summary["router"]["calls"], summary["oracle"]["calls"]
    always_calls = summary["always_tools"]["calls"]
    out["loose_budget"] = {
        "accuracy_minus_always_tools": against_always,
        "calls_per_question": calls,
        "oracle_calls_per_question": oracle_calls,
        "calls_cut_against_always_tools": (calls - always_calls) / always_calls if always_calls else None,
        "holds": (abs(against_always["difference"]) <= against_always["paired_se"] and calls <= 1.1 * oracle_calls)
        if loose
        else None,
    }
    on_needed = summary["router"]["tool_use_on_needed"]
    out["budget"] = {
        "policy_cost_last_third": policy_cost_last_third,
        "tool_use_on_needed": on_needed,
        "holds": None
        if policy_cost_last_third is None
        else bool(abs(policy_cost_last_third - budget) <= 0.05 and on_needed is not None and on_needed >= 0.9),
    }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (the module docstring); prints each criterion's verdict."""
    parser = argparse.ArgumentParser(prog="python -m verl.trainer.route_qa.report", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--budget", type=float, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--metrics", default=None, help="the run's metrics.jsonl (for the budget criterion)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    data_dir = Path(args.data_dir)
    rows = load_rows(data_dir / f"{args.split}.parquet")
    table = read_table(args.table, rows)
    routes = router_routes(args.checkpoint, rows)
    last = last_third_mean(args.metrics) if args.metrics else None
    result = criteria(table, rows, routes, load_rows(data_dir / "train.parquet"), args.budget, last)
    result["command"] = "python -m verl.trainer.route_qa.report " + " ".join(argv if argv is not None else sys.argv[1:])
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    for name in ("route_shares", "payoff", "loose_budget", "budget"):
        print(name, result[name])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
