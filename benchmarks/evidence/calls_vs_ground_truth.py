"""Split RLLA generations by the number of tool calls against the ground truth's, with the mean correctness of each.

    python benchmarks/evidence/calls_vs_ground_truth.py GENERATIONS.jsonl [MORE.jsonl ...]

For each file (``main_generation`` output: one sample per line with ``tool_calls`` and ``ground_truth_tool_calls``),
prints how many samples call fewer tools than the ground truth (a response that parses to no call counts as zero),
the same number, or more, and the mean RLLA correctness (``verl.trainer.main_eval.row_metrics``, ToolRL's reward with
no switches) of each group: it shows how the reward weighs a missing call against a surplus one, and where a trained
policy moved. Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the line that is not JSON
(``read_generations``).
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict

from verl.trainer.main_eval import read_generations, row_metrics
from verl.utils.reward_score.rlla import RewardSwitches


def split_by_call_count(path: str) -> dict[str, dict[str, float]]:
    """``{"fewer" | "same" | "more": {"samples": n, "correctness": mean}}`` for one generations file."""
    groups: dict[str, list[float]] = defaultdict(list)
    for row in read_generations(path):
        predicted, truth = len(row.get("tool_calls") or []), len(row.get("ground_truth_tool_calls") or [])
        key = "more" if predicted > truth else "fewer" if predicted < truth else "same"
        groups[key].append(row_metrics(row, RewardSwitches())["correctness"])
    return {key: {"samples": len(values), "correctness": round(statistics.fmean(values), 3)}
            for key, values in sorted(groups.items())}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: calls_vs_ground_truth.py GENERATIONS.jsonl [MORE.jsonl ...]")
    for generations in sys.argv[1:]:
        print(generations, json.dumps(split_by_call_count(generations)))
