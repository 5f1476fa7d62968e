"""Tool-call accuracy of generations: ``python -m verl.trainer.main_eval --generations out.jsonl``.

Input: the JSONL written by ``verl.trainer.main_generation`` — one object per (prompt, sample) with at least
``response`` (str) and ``ground_truth`` (str in the RLLA output format, or null) or ``ground_truth_tool_calls``
(list of ``{name, parameters}``); ``data_source`` and ``finished`` are used when present.

Per row:

- predicted calls: every readable call of every complete ``<tool_call>`` block of the response, read with the
  project's one lenient parser (``tool_parse.parse_tool_calls`` / ``tool_usage``: ``arguments`` accepted for
  ``parameters``, pretty-printed JSON and JSON lists accepted);
- **parse failure**: the response contains ``<tool_call>`` but no complete block, or some item of a block is not a
  readable call. A parse failure never counts as a match;
- **exact match**: the predicted calls equal the ground-truth calls as a multiset — each call compared as parsed JSON
  (``json.dumps(sort_keys=True)`` of ``{name, parameters}``: key order is irrelevant, values must be equal with their
  JSON types, ``"1"`` ≠ ``1``), extra or missing calls fail, and the order of calls does not matter (calls of one
  turn are simultaneous in the RLLA format; API-Bank level-1 has exactly one call per row, 399/399, so order never
  arises there);
- **name match**: the multiset of called names equals the ground truth's;
- RLLA reward (``rlla.compute_score(response, ground_truth, step=0, wrapper="qwen")``, switches read from the
  environment once and reported) for rows with a ground-truth string. The response is the decoded response with
  special tokens kept, which gives the same prediction as ToolRL's prompt + response decode.

Summary (JSON, written atomically and printed): ``exact_match`` / ``name_match`` over the rows whose ground truth has
at least one call (the tool-call accuracy), ``no_call_accuracy`` over the rows whose ground truth has none (the
prediction made no call and did not fail to parse), ``overall_exact_match`` over all rows (an empty prediction
matches an empty ground truth), ``parse_failure_rate`` and ``no_tool_call_rate`` (no ``<tool_call>`` at all) over all
rows, and the mean RLLA ``score`` / ``format`` / ``correctness``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from verl.utils.fs import atomic_path
from verl.utils.jsonl import iter_json_objects
from verl.utils.reward_score.rlla import InvalidGroundTruthError, RewardSwitches, compute_score
from verl.utils.reward_score.tool_parse import parse_tool_calls, tool_usage

logger = logging.getLogger(__name__)

DATASETS = {"auto": None, "rlla": "rlla", "api_bank": "rlla_api_bank"}  # --dataset -> data_source kept


# ---------------------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------------------
def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary sibling file and ``os.replace`` (never a partial file)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def default_summary_path(generations_path: str | os.PathLike) -> Path:
    """``out.jsonl`` → ``out.summary.json`` (beside the generations)."""
    path = Path(generations_path)
    stem = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    return path.with_name(f"{stem}.summary.json")


def read_generations(path: str | os.PathLike) -> list[dict]:
    """Read a generations JSONL file (blank lines skipped).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line is not a JSON object, lacks a string ``response``, or has neither ``ground_truth`` nor
            ``ground_truth_tool_calls`` (``file:line: key: problem``).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"generations file {path} not found")
    rows = []
    for lineno, row in iter_json_objects(path):
        if not isinstance(row.get("response"), str):
            raise ValueError(f"{path}:{lineno}: response: expected a string, got {row.get('response')!r:.60}")
        if row.get("ground_truth") is None and row.get("ground_truth_tool_calls") is None:
            raise ValueError(f"{path}:{lineno}: ground_truth: missing (need ground_truth or "
                             "ground_truth_tool_calls)")
        row["_where"] = f"{path}:{lineno}"
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# Scoring one row
# ---------------------------------------------------------------------------------------------------------------------
def canonical_call(call: Mapping) -> str:
    """A call as canonical JSON: ``{"name", "parameters"}`` with sorted keys at every level."""
    return json.dumps({"name": call["name"], "parameters": call.get("parameters") or {}}, sort_keys=True,
                      ensure_ascii=False)


def calls_exact_match(predicted: Sequence[Mapping], ground_truth: Sequence[Mapping]) -> bool:
    """Equal as multisets of canonical calls (order-insensitive, duplicates counted, key order irrelevant)."""
    return Counter(map(canonical_call, predicted)) == Counter(map(canonical_call, ground_truth))


def call_names_match(predicted: Sequence[Mapping], ground_truth: Sequence[Mapping]) -> bool:
    """Equal multisets of tool names."""
    return Counter(c["name"] for c in predicted) == Counter(c["name"] for c in ground_truth)


def ground_truth_calls(ground_truth: str, where: str = "ground_truth") -> list[dict]:
    """The calls of a ground truth in the RLLA format (``[]`` when it has no ``<tool_call>``).

    Raises:
        InvalidGroundTruthError: the ground truth has a ``<tool_call>`` block that is unclosed or not readable.
    """
    usage = tool_usage(ground_truth)
    if usage.has_tool_call_tag and (usage.num_blocks == 0 or usage.num_invalid > 0):
        raise InvalidGroundTruthError(f"{where}: the <tool_call> block cannot be read as tool calls: "
                                      f"{ground_truth[:200]!r}")
    return parse_tool_calls(ground_truth)


def score_prediction(response: str, gt_calls: Sequence[Mapping]) -> dict:
    """Tool-call metrics of one response against the ground-truth calls (see the module docstring).

    Returns:
        ``{tool_calls, num_calls, parse_failure, no_tool_call, exact_match, name_match}``.
    """
    usage = tool_usage(response)
    calls = parse_tool_calls(response)
    failure = usage.has_tool_call_tag and (usage.num_blocks == 0 or usage.num_invalid > 0)
    return {
        "tool_calls": calls,
        "num_calls": len(calls),
        "parse_failure": failure,
        "no_tool_call": not usage.has_tool_call_tag,
        "exact_match": not failure and calls_exact_match(calls, gt_calls),
        "name_match": not failure and call_names_match(calls, gt_calls),
    }


def _row_gt_calls(row: Mapping) -> list[dict]:
    calls = row.get("ground_truth_tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not all(isinstance(c, Mapping) and isinstance(c.get("name"), str)
                                                  for c in calls):
            raise ValueError(f"{row.get('_where', 'row')}: ground_truth_tool_calls: expected a list of "
                             f"{{name, parameters}} objects, got {calls!r:.80}")
        return list(calls)
    return ground_truth_calls(row["ground_truth"], f"{row.get('_where', 'row')}: ground_truth")


# ---------------------------------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------------------------------
def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def evaluate_rows(rows: Sequence[Mapping], dataset: str = "auto", wrapper: str = "qwen",
                  switches: RewardSwitches | None = None) -> dict:
    """Summary metrics of generation rows (see the module docstring for every field).

    Args:
        rows: generation rows (``response`` plus ``ground_truth`` and/or ``ground_truth_tool_calls``).
        dataset: ``auto`` (all rows), ``rlla`` or ``api_bank`` (only rows whose ``data_source`` is ``rlla`` /
            ``rlla_api_bank``).
        wrapper: chat wrapper of the RLLA reward.
        switches: RLLA reward switches; None reads the environment once.

    Raises:
        ValueError: unknown ``dataset``, or no row left after filtering.
        InvalidGroundTruthError: a ground truth cannot be parsed (the row is named).
    """
    if dataset not in DATASETS:
        raise ValueError(f"eval.dataset / --dataset: {dataset!r} is not one of {sorted(DATASETS)}")
    source = DATASETS[dataset]
    kept = [r for r in rows if source is None or r.get("data_source") == source]
    if not kept:
        found = sorted(Counter(str(r.get("data_source")) for r in rows))
        raise ValueError(f"no generation rows for dataset={dataset!r} (data_source {source!r}); found {found}")
    switches = RewardSwitches.from_env() if switches is None else switches
    scored, rewards = [], []
    for row in kept:
        gt_calls = _row_gt_calls(row)
        scored.append((gt_calls, score_prediction(row["response"], gt_calls)))
        if isinstance(row.get("ground_truth"), str):
            score, fmt, correctness, _ = compute_score(row["response"], row["ground_truth"], step=0, wrapper=wrapper,
                                                       switches=switches)
            rewards.append((score, fmt, correctness))
    call_rows = [s for gt, s in scored if gt]
    no_call_rows = [s for gt, s in scored if not gt]
    finished = [bool(r["finished"]) for r in kept if "finished" in r]
    summary = {
        "dataset": dataset,
        "rows": len(kept),
        "data_sources": dict(Counter(str(r.get("data_source")) for r in kept)),
        "tool_call_rows": len(call_rows),
        "no_call_rows": len(no_call_rows),
        "exact_match_count": sum(s["exact_match"] for s in call_rows),
        "exact_match": _mean(float(s["exact_match"]) for s in call_rows),
        "name_match": _mean(float(s["name_match"]) for s in call_rows),
        "no_call_accuracy": _mean(float(s["num_calls"] == 0 and not s["parse_failure"]) for s in no_call_rows),
        "overall_exact_match": _mean(float(s["exact_match"]) for _, s in scored),
        "parse_failure_count": sum(s["parse_failure"] for _, s in scored),
        "parse_failure_rate": _mean(float(s["parse_failure"]) for _, s in scored),
        "no_tool_call_rate": _mean(float(s["no_tool_call"]) for _, s in scored),
        "mean_predicted_calls": _mean(s["num_calls"] for _, s in scored),
        "finished_rate": _mean(map(float, finished)),
        "rlla_reward": {
            "rows": len(rewards),
            "wrapper": wrapper,
            "switches": switches.active(),
            "score": _mean(r[0] for r in rewards),
            "format": _mean(r[1] for r in rewards),
            "correctness": _mean(r[2] for r in rewards),
        },
    }
    return summary


def evaluate_file(generations: str | os.PathLike, dataset: str = "auto", output: str | os.PathLike | None = None,
                  extra: Mapping[str, Any] | None = None) -> dict:
    """Read ``generations``, compute :func:`evaluate_rows`, add ``generations`` and ``extra``, write the summary JSON
    atomically to ``output`` (default :func:`default_summary_path`) and return it (with ``summary_path``)."""
    summary = {"generations": str(generations), **evaluate_rows(read_generations(generations), dataset)}
    summary.update(extra or {})
    path = Path(output) if output else default_summary_path(generations)
    summary["summary_path"] = str(path)
    atomic_write_text(path, json.dumps(summary, indent=2) + "\n")
    logger.info("eval: %d rows, exact_match=%s name_match=%s parse_failure_rate=%s -> %s", summary["rows"],
                summary["exact_match"], summary["name_match"], summary["parse_failure_rate"], path)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: score a generations JSONL, write ``<name>.summary.json`` (or ``--output``) and print the summary."""
    parser = argparse.ArgumentParser(description="Tool-call accuracy and RLLA reward of a generations JSONL file.")
    parser.add_argument("--generations", required=True, help="JSONL written by verl.trainer.main_generation")
    parser.add_argument("--dataset", default="auto", choices=sorted(DATASETS),
                        help="auto: every row; rlla / api_bank: only rows of that data source")
    parser.add_argument("--output", default=None, help="summary JSON (default: <generations>.summary.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("VERL_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    summary = evaluate_file(args.generations, args.dataset, args.output)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
