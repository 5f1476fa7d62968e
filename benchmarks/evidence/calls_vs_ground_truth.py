"""Split RLLA generations by the number of tool calls against the ground truth's, with the mean correctness of each.

    python benchmarks/evidence/calls_vs_ground_truth.py GENERATIONS.jsonl [MORE.jsonl ...] [--output X.json]

For each file (``main_generation`` output: one sample per line with ``tool_calls`` and ``ground_truth_tool_calls``),
prints how many samples call fewer tools than the ground truth (a response that parses to no call counts as zero),
the same number, or more, and the mean RLLA correctness (``verl.trainer.main_eval.row_metrics``, ToolRL's reward with
no switches) of each group: it shows how the reward weighs a missing call against a surplus one, and where a trained
policy moved. ``--output`` also writes the splits, keyed by file, with the command, to a JSON file. Raises
``FileNotFoundError`` for a missing file and ``ValueError`` naming the line that is not JSON (``read_generations``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict

from verl.trainer.main_eval import read_generations, row_metrics
from verl.utils.reward_score.rlla import RewardSwitches


def split_by_call_count(path: str) -> dict[str, dict[str, float]]:
    """``{"fewer" | "same" | "more": {"samples": n, "correctness": mean}}`` for one generations file."""
    groups: dict[str, list[float]] = defaultdict(list)
    switches = RewardSwitches()
    for row in read_generations(path):
        predicted, truth = len(row.get("tool_calls") or []), len(row.get("ground_truth_tool_calls") or [])
        key = "more" if predicted > truth else "fewer" if predicted < truth else "same"
        groups[key].append(row_metrics(row, switches)["correctness"])
    return {key: {"samples": len(values), "correctness": round(statistics.fmean(values), 3)}
            for key, values in sorted(groups.items())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("generations", nargs="+", help="main_generation JSONL files")
    parser.add_argument("--output", default=None, help="also write the splits and the command to this JSON file")
    args = parser.parse_args(argv)
    splits = {}
    for generations in args.generations:
        splits[generations] = split_by_call_count(generations)
        print(generations, json.dumps(splits[generations]))
    if args.output:
        command = " ".join(["python benchmarks/evidence/calls_vs_ground_truth.py", *(argv or sys.argv[1:])])
        with open(args.output, "w") as handle:
            json.dump({"command": command, "splits": splits}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
