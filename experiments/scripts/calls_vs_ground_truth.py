"""Split RLLA generations by the number of tool calls against the ground truth's, with the mean correctness of each.

    python experiments/scripts/calls_vs_ground_truth.py GENERATIONS.jsonl [MORE.jsonl ...] [--output X.json]

For each file (``main_generation`` output: one sample per line with ``tool_calls`` and ``ground_truth_tool_calls``),
prints how many samples call fewer tools than the ground truth (a response that parses to no call counts as zero),
the same number, or more, and the mean RLLA correctness (``verl.trainer.main_eval.row_metrics``, ToolRL's reward with
no switches) of each group: it shows how the reward weighs a missing call against a surplus one, and where a trained
policy moved. It also counts the prompts whose samples (several per prompt: ``main_generation data.n_samples``) do not
all get the same RLLA score: under GRPO the advantage is the score minus its group's mean (over the group's standard
deviation), so a prompt all of whose samples score the same (e.g. all call a tool where the ground truth calls none,
all 0) gives every sample an advantage of 0 and teaches nothing (Shao et al. 2024, DeepSeekMath §4.1.2).
``--output`` also writes the splits and those counts, keyed by file, with the command, to a JSON file. Raises
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


def _split(row: dict) -> str:
    """ "fewer", "same" or "more": the row's parsed tool calls against its ground truth's."""
    predicted, truth = len(row.get("tool_calls") or []), len(row.get("ground_truth_tool_calls") or [])
    return "more" if predicted > truth else "fewer" if predicted < truth else "same"


def split_by_call_count(path: str) -> dict[str, dict[str, float]]:
    """``{"fewer" | "same" | "more": {"samples": n, "correctness": mean}}`` for one generations file."""
    groups: dict[str, list[float]] = defaultdict(list)
    switches = RewardSwitches()
    for row in read_generations(path):
        groups[_split(row)].append(row_metrics(row, switches)["correctness"])
    return {
        key: {"samples": len(values), "correctness": round(statistics.fmean(values), 3)}
        for key, values in sorted(groups.items())
    }


def prompts_whose_scores_differ(path: str, switches: RewardSwitches | None = None) -> dict[str, int]:
    """``{"prompts": n, "scores_differ": m}``: how many prompts one generations file holds (rows grouped by
    ``data_source`` and ``row``, else ``index``) and on how many of them the samples' RLLA scores
    (``verl.trainer.main_eval.row_metrics`` with ``switches``, default none) are not all equal."""
    switches = switches or RewardSwitches()
    scores: dict[tuple, set] = defaultdict(set)
    for row in read_generations(path):
        scores[(row.get("data_source"), row.get("row", row.get("index")))].add(row_metrics(row, switches)["score"])
    return {"prompts": len(scores), "scores_differ": sum(len(values) > 1 for values in scores.values())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("generations", nargs="+", help="main_generation JSONL files")
    parser.add_argument(
        "--output", default=None, help="also write the splits, the prompt counts and the command to this JSON file"
    )
    args = parser.parse_args(argv)
    splits, prompts = {}, {}
    for generations in args.generations:
        splits[generations] = split_by_call_count(generations)
        prompts[generations] = prompts_whose_scores_differ(generations)
        print(generations, json.dumps(splits[generations]), json.dumps(prompts[generations]))
    if args.output:
        command = " ".join(["python experiments/scripts/calls_vs_ground_truth.py", *(argv or sys.argv[1:])])
        with open(args.output, "w") as handle:
            json.dump({"command": command, "splits": splits, "prompts": prompts}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
