"""Pool router frontiers measured on disjoint prompt samples (e.g. BFCL rows 1-12 and rows 13-30).

    python experiments/scripts/pool_frontiers.py A_frontier.json B_frontier.json \
        --points learned_expected learned_calibrated_expected --output pooled.json

For each point (a stochastic policy scored in expectation by ``router_frontier.py``) present in every file:

- the paired gain over random routing at the same cost with the policy's own SEARCH : CALCULATE split
  (``paired_vs_random_same_cost_same_split_expected.score``): the prompt-weighted mean of the samples' mean gains,
  ``Σ n_i m_i / N``, with the standard error of that weighted mean of independent samples, ``sqrt(Σ n_i² se_i²) / N``
  (``n_i`` prompts, ``N`` in all); the same weights for the mean cost;
- ``tool_route_frac_gap``: the two groups (prompts whose ground truth calls no tool / calls one) are pooled exactly
  from each sample's ``n``, ``mean`` and sample variance, and Welch's standard error is computed on the pooled groups
  (``router_frontier.gap``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path

_spec = importlib.util.spec_from_file_location("router_frontier", Path(__file__).with_name("router_frontier.py"))
frontier = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(frontier)

GAIN = "paired_vs_random_same_cost_same_split_expected"


def pool_groups(groups: list[dict]) -> dict:
    """One ``{"n", "mean", "var"}`` (``router_frontier.group_stats``) from several disjoint groups, exactly: the
    pooled sample variance is ``(Σ (n_i − 1)·var_i + Σ n_i·(m_i − M)²) / (N − 1)``.

    Raises:
        ValueError: a group with two or more values and no variance (the numbers cannot be pooled).
    """
    groups = [g for g in groups if g["n"]]
    total = sum(g["n"] for g in groups)
    if not total:
        return {"n": 0, "mean": None, "var": None}
    mean = sum(g["n"] * g["mean"] for g in groups) / total
    if total < 2:
        return {"n": total, "mean": mean, "var": None}
    if any(g["n"] > 1 and g["var"] is None for g in groups):
        raise ValueError(f"a group of two or more values has no variance: {groups}")
    within = sum((g["n"] - 1) * g["var"] for g in groups if g["n"] > 1)
    between = sum(g["n"] * (g["mean"] - mean) ** 2 for g in groups)
    return {"n": total, "mean": mean, "var": (within + between) / (total - 1)}


def pool_point(points: list[dict]) -> dict:
    """The pooled figures of one policy's points from disjoint samples (module docstring).

    Raises:
        KeyError: a point lacks ``rows``, the gain or ``tool_route_frac_gap`` (a frontier written before they existed).
        ValueError: a sample's gain has no standard error (fewer than two prompts): the pooled se needs every
            sample's; the message gives the sample's place in ``points`` (0-based). Also :func:`pool_groups`'s.
    """
    n = [p["rows"] for p in points]
    total = sum(n)
    gains = [p[GAIN]["score"] for p in points]
    for i, g in enumerate(gains):
        if g.get("se") is None:
            raise ValueError(
                f"sample {i} ({n[i]} prompt(s)): its {GAIN}.score has no standard error; pooling "
                "needs one for every sample"
            )
    out = {
        "rows": total,
        "mean_cost": sum(k * p["mean_cost"] for k, p in zip(n, points)) / total,
        GAIN: {
            "score": {
                "mean": sum(k * g["mean"] for k, g in zip(n, gains)) / total,
                "se": math.sqrt(sum((k * g["se"]) ** 2 for k, g in zip(n, gains))) / total,
            }
        },
    }
    gaps = [p["tool_route_frac_gap"] for p in points]
    out["tool_route_frac_gap"] = frontier.gap(
        pool_groups([g["no_call"] for g in gaps]), pool_groups([g["call"] for g in gaps])
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frontiers", nargs="+", help="router_frontier.py JSON files of disjoint prompt samples")
    parser.add_argument("--points", nargs="+", default=["learned_expected", "learned_calibrated_expected"])
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    loaded = {path: json.loads(Path(path).read_text())["points"] for path in args.frontiers}
    pooled = {}
    for label in args.points:
        missing = [path for path, points in loaded.items() if label not in points]
        if missing:
            raise SystemExit(f"point {label!r} is missing from {missing}")
        try:
            pooled[label] = pool_point([points[label] for points in loaded.values()])
        except ValueError as err:  # name the files; a sample's place in them is in the message
            raise SystemExit(f"point {label!r} of {list(loaded)} (samples 0-based in this order): {err}") from err
        g, d = pooled[label][GAIN]["score"], pooled[label]["tool_route_frac_gap"]
        fmt = lambda x, spec: "n/a" if x is None else format(x, spec)  # noqa: E731
        print(
            f"{label}: {pooled[label]['rows']} prompts, cost {pooled[label]['mean_cost']:.3f}, gain over random at "
            f"the same cost and split {g['mean']:+.4f} ± {g['se']:.4f}; P(tool route) no-call minus call "
            f"{fmt(d['no_call_minus_call'], '+.3f')} ± {fmt(d['se'], '.3f')}"
        )
    Path(args.output).write_text(json.dumps({"frontiers": args.frontiers, "points": pooled}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
