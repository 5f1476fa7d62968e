"""Tool-call accuracy of generations: ``python -m verl.trainer.main_eval --generations out.jsonl``.

Benchmarks and oracles (the benchmark's own answers fed through the same conversion and checker: 100% by design)::

    python -m verl.trainer.main_eval --dataset bfcl --generations gen.jsonl        # rows of data.format=bfcl
    python -m verl.trainer.main_eval --dataset bfcl --categories simple_python,irrelevance,live_simple --oracle
    python -m verl.trainer.main_eval --dataset bfcl --categories multi_turn_base --oracle --output s.json  # the loop
    python -m verl.trainer.main_eval --dataset bfcl --categories multi_turn_base --model smollm2-135m-sft \\
        --max-rows 20 --output s.json                                      # a model plays the rows through the loop
    python -m verl.trainer.main_eval --dataset api_bank --data-path level-2-api_processed.json --oracle
    python -m verl.trainer.main_eval --generations after.jsonl --baseline before.jsonl  # paired gain, same prompts

BFCL rows are scored by BFCL's own checker (:mod:`verl.trainer.eval_bfcl`; multi-turn categories play through the
executing multi-turn loop, :mod:`verl.trainer.eval_bfcl_multi_turn`); everything below is for RLLA-format
ground truths (RLLA, API-Bank). Every summary has a ``tool_cost`` block (:func:`verl.trainer.tool_cost.
tool_cost_metrics`: calls per prompt, tool-use rate, call/no-call decision accuracy and F1, tool productivity).

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

from verl.trainer.eval_bfcl import check_bfcl_rows, evaluate_bfcl_rows, oracle_bfcl_rows
from verl.trainer.eval_bfcl_multi_turn import CONTROLS, main_multi_turn, wants_multi_turn
from verl.trainer.eval_compare import paired_comparison
from verl.trainer.tool_cost import tool_cost_metrics
from verl.utils.dataset.bfcl import CATEGORIES as BFCL_CATEGORIES, RELEVANCE_CATEGORIES
from verl.utils.dataset.bfcl_multi_turn import MULTI_TURN_CATEGORIES
from verl.utils.fs import atomic_path
from verl.utils.jsonl import JsonInputError, iter_json_objects
from verl.utils.reward_score.rlla import InvalidGroundTruthError, RewardSwitches, compute_score
from verl.utils.reward_score.tool_formats import TOOL_FORMATS, parse_calls
from verl.utils.reward_score.tool_parse import parse_tool_calls, tool_usage

logger = logging.getLogger(__name__)

DATASETS = {"auto": None, "rlla": "rlla", "api_bank": "rlla_api_bank", "bfcl": "bfcl"}  # --dataset -> data_source


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
    stem = path.name.removesuffix(".jsonl")
    return path.with_name(f"{stem}.summary.json")


def read_generations(path: str | os.PathLike) -> list[dict]:
    """Read a generations JSONL file (blank lines skipped).

    Args:
        path: the JSONL file.

    Returns:
        The rows, each with ``_where`` (``file:line``) added.

    Raises:
        FileNotFoundError: no such file.
        JsonInputError: a line is not valid UTF-8, not valid JSON or not a JSON object (a ``ValueError``:
            ``file PATH, line N: problem``).
        ValueError: a row lacks a string ``response``, has neither ``ground_truth`` nor ``ground_truth_tool_calls``, or
            a ``ground_truth`` that is not a string (``file:line: key: problem``); the file has no row.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"generations file {path} not found")
    rows = []
    for lineno, row in iter_json_objects(path):
        if not isinstance(row.get("response"), str):
            raise ValueError(f"{path}:{lineno}: response: expected a string, got {row.get('response')!r:.60}")
        if row.get("ground_truth") is None and row.get("ground_truth_tool_calls") is None:
            raise ValueError(f"{path}:{lineno}: ground_truth: missing (need ground_truth or ground_truth_tool_calls)")
        if row.get("ground_truth") is not None and not isinstance(row["ground_truth"], str):
            raise ValueError(
                f"{path}:{lineno}: ground_truth: expected a string, got {type(row['ground_truth']).__name__} "
                f"{row['ground_truth']!r:.60}"
            )
        row["_where"] = f"{path}:{lineno}"
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no generation rows (the file is empty)")
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# Scoring one row
# ---------------------------------------------------------------------------------------------------------------------
def canonical_call(call: Mapping) -> str:
    """A call as canonical JSON: ``{"name", "parameters"}`` with sorted keys at every level."""
    return json.dumps(
        {"name": call["name"], "parameters": call.get("parameters") or {}}, sort_keys=True, ensure_ascii=False
    )


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
    if usage.parse_failed:
        raise InvalidGroundTruthError(
            f"{where}: the <tool_call> block cannot be read as tool calls: {ground_truth[:200]!r}"
        )
    return parse_tool_calls(ground_truth)


def score_prediction(response: str, gt_calls: Sequence[Mapping], tool_format: str = "toolrl") -> dict:
    """Tool-call metrics of one response against the ground-truth calls (see the module docstring).

    Args:
        tool_format: how the response writes its calls (``verl.utils.reward_score.tool_formats``: ``toolrl``, the
            default and the RLLA reward's; ``hermes``, ``llama3``, ``mistral``).

    Returns:
        ``{tool_calls, num_calls, parse_failure, no_tool_call, exact_match, name_match}``.
    """
    if tool_format == "toolrl":
        usage = tool_usage(response)
        calls, failure, attempted = parse_tool_calls(response), usage.parse_failed, usage.has_tool_call_tag
    else:
        parsed = parse_calls(response, tool_format)
        calls, failure, attempted = list(parsed.calls), parsed.parse_failed, parsed.attempted
    return {
        "tool_calls": calls,
        "num_calls": len(calls),
        "parse_failure": failure,
        "no_tool_call": not attempted,
        "exact_match": not failure and calls_exact_match(calls, gt_calls),
        "name_match": not failure and call_names_match(calls, gt_calls),
    }


def decision_right(gt_calls: Sequence[Mapping], scored: Mapping) -> bool:
    """A row answered right: the exact calls when the ground truth calls tools, else no call and no parse failure."""
    return bool(scored["exact_match"]) if gt_calls else (scored["num_calls"] == 0 and not scored["parse_failure"])


def row_metrics(
    row: Mapping, switches: RewardSwitches, wrapper: str = "qwen", tool_format: str = "toolrl"
) -> dict[str, float]:
    """The per-row values of a paired comparison (:mod:`verl.trainer.eval_compare`): ``exact_match`` (1.0 when the
    predicted calls equal the ground truth's; on a no-call row, when nothing was called and nothing failed to parse)
    and, for rows with a ground-truth string, the RLLA reward's ``score``, ``format`` and ``correctness``.

    Raises:
        InvalidGroundTruthError, ValueError: the ground truth cannot be read (the row is named).
    """
    gt_calls = _row_gt_calls(row)
    scored = score_prediction(row["response"], gt_calls, tool_format)
    right = decision_right(gt_calls, scored)
    out = {"exact_match": float(right)}
    if isinstance(row.get("ground_truth"), str):
        score, fmt, correctness, _ = compute_score(
            row["response"], row["ground_truth"], step=0, wrapper=wrapper, switches=switches, tool_format=tool_format
        )
        out.update(score=float(score), format=float(fmt), correctness=float(correctness))
    return out


def _row_gt_calls(row: Mapping) -> list[dict]:
    calls = row.get("ground_truth_tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not all(
            isinstance(c, Mapping) and isinstance(c.get("name"), str) for c in calls
        ):
            raise ValueError(
                f"{row.get('_where', 'row')}: ground_truth_tool_calls: expected a list of "
                f"{{name, parameters}} objects, got {calls!r:.80}"
            )
        return list(calls)
    return ground_truth_calls(row["ground_truth"], f"{row.get('_where', 'row')}: ground_truth")


# ---------------------------------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------------------------------
def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def evaluate_rows(
    rows: Sequence[Mapping],
    dataset: str = "auto",
    wrapper: str = "qwen",
    switches: RewardSwitches | None = None,
    tool_format: str = "toolrl",
) -> dict:
    """Summary metrics of generation rows (see the module docstring for every field).

    Args:
        rows: generation rows (``response`` plus ``ground_truth`` and/or ``ground_truth_tool_calls``).
        dataset: ``auto`` (all rows), ``rlla`` or ``api_bank`` (only rows whose ``data_source`` is ``rlla`` /
            ``rlla_api_bank``).
        wrapper: chat wrapper of the RLLA reward.
        switches: RLLA reward switches; None reads the environment once.
        tool_format: how the responses write their calls (:func:`score_prediction`, and the RLLA reward's
            ``tool_format``, as in training with ``data.tool_format``).

    Raises:
        ValueError: unknown ``dataset``, or no row left after filtering.
        InvalidGroundTruthError: a ground truth cannot be parsed (the row is named).
    """
    if dataset not in DATASETS:
        raise ValueError(f"eval.dataset / --dataset: {dataset!r} is not one of {sorted(DATASETS)}")
    source = DATASETS[dataset]
    # BFCL oracle rows have no data_source: they are BFCL's by construction
    kept = [r for r in rows if source is None or r.get("data_source", "bfcl" if "bfcl_id" in r else None) == source]
    if not kept:
        found = sorted(Counter(str(r.get("data_source")) for r in rows))
        raise ValueError(f"no generation rows for dataset={dataset!r} (data_source {source!r}); found {found}")
    bfcl_rows = sum("bfcl_id" in r for r in kept)
    if dataset == "auto" and bfcl_rows:
        if bfcl_rows != len(kept):
            raise ValueError(
                f"{bfcl_rows} of {len(kept)} rows are BFCL rows (bfcl_id): BFCL is scored by its own "
                "checker, the others by exact match; evaluate them separately with --dataset"
            )
        dataset = "bfcl"
    if dataset == "bfcl":
        return evaluate_bfcl_rows(kept)
    switches = RewardSwitches.from_env() if switches is None else switches
    scored, rewards = [], []
    for row in kept:
        gt_calls = _row_gt_calls(row)
        scored.append((gt_calls, score_prediction(row["response"], gt_calls, tool_format)))
        if isinstance(row.get("ground_truth"), str):
            score, fmt, correctness, _ = compute_score(
                row["response"],
                row["ground_truth"],
                step=0,
                wrapper=wrapper,
                switches=switches,
                tool_format=tool_format,
            )
            rewards.append((score, fmt, correctness))
    call_rows = [s for gt, s in scored if gt]
    no_call_rows = [s for gt, s in scored if not gt]
    finished = [bool(r["finished"]) for r in kept if "finished" in r]
    made_call = [s["num_calls"] > 0 and not s["parse_failure"] for _, s in scored]
    right = [decision_right(gt, s) for gt, s in scored]
    summary = {
        "dataset": dataset,
        "tool_format": tool_format,
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
        "tool_cost": tool_cost_metrics(
            [s["num_calls"] for _, s in scored], [bool(gt) for gt, _ in scored], right, made_call=made_call
        ),
    }
    return summary


def evaluate_file(
    generations: str | os.PathLike,
    dataset: str = "auto",
    output: str | os.PathLike | None = None,
    extra: Mapping[str, Any] | None = None,
    rows: Sequence[Mapping] | None = None,
    tool_format: str = "toolrl",
) -> dict:
    """Read ``generations``, compute :func:`evaluate_rows`, add ``generations`` and ``extra``, write the summary JSON
    atomically to ``output`` (default :func:`default_summary_path`) and return it (with ``summary_path``).

    Args:
        generations: the generations JSONL.
        dataset: see :func:`evaluate_rows`.
        output: summary path (None: beside ``generations``).
        extra: more keys for the summary.
        rows: the rows of ``generations`` when already read by :func:`read_generations` (None: read them here).

    Returns:
        The summary.

    Raises:
        FileNotFoundError, JsonInputError, ValueError: as :func:`read_generations` and :func:`evaluate_rows`.
    """
    rows = read_generations(generations) if rows is None else rows
    summary = {"generations": str(generations), **evaluate_rows(rows, dataset, tool_format=tool_format)}
    summary.update(extra or {})
    path = Path(output) if output else default_summary_path(generations)
    summary["summary_path"] = str(path)
    atomic_write_text(path, json.dumps(summary, indent=2) + "\n")
    headline = {k: summary[k] for k in ("exact_match", "name_match", "parse_failure_rate", "bfcl") if k in summary}
    logger.info("eval: %d rows, %s -> %s", summary["rows"], headline, path)
    return summary


def oracle_rows(
    dataset: str, data_path: str | None = None, categories: str | None = None, max_rows: int | None = None
) -> tuple[list[dict], dict]:
    """Rows whose response is the benchmark's own answer, and notes for the summary: BFCL
    (:func:`verl.trainer.eval_bfcl.oracle_bfcl_rows`; default categories: every one that ships answers or is an
    irrelevance category; ``oracle_excluded`` names the entries no response can pass), API-Bank (``data_path``: any
    level file of ToolRL's processed form) or RLLA (``data_path``: an RLLA-schema parquet; default the test split).

    Raises:
        ValueError: ``dataset`` is ``auto`` or unknown; errors of the loaders (file, row and key named).
    """
    if dataset == "bfcl":
        if categories is None:
            categories = ",".join(c for c in BFCL_CATEGORIES if c not in RELEVANCE_CATEGORIES)
        rows, excluded = oracle_bfcl_rows(categories, max_rows)
        if excluded:
            logger.warning(
                "oracle: %d BFCL entries left out, no response passes BFCL's checker on them: %s",
                len(excluded),
                excluded,
            )
        return rows, {"oracle_excluded": excluded}
    if dataset == "api_bank":
        from verl.utils.dataset.api_bank import api_bank_rlla_rows

        rows = api_bank_rlla_rows(data_path)
    elif dataset == "rlla":
        import pandas as pd

        from verl.utils.dataset.rlla_data import resolve_rlla_file

        frame = pd.read_parquet(data_path or resolve_rlla_file("test"))
        rows = frame.to_dict("records")
    else:
        raise ValueError(f"--oracle needs --dataset bfcl, api_bank or rlla, got {dataset!r}")
    rows = rows[:max_rows] if max_rows and max_rows > 0 else rows
    out = []
    for i, row in enumerate(rows):
        gt = row["reward_model"]["ground_truth"]
        out.append(
            {
                "response": gt,
                "ground_truth": gt,
                "data_source": row["data_source"],
                "_where": f"{data_path or dataset}:{i}",
            }
        )
    return out, {"data_path": str(data_path) if data_path else None}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: score a generations JSONL (or the benchmark's oracle), write the summary JSON and print it.

    Args:
        argv: command-line arguments (None: ``sys.argv[1:]``).

    Returns:
        0; or 2 when the input cannot be read (a missing file, a generations line that is not UTF-8 / JSON / a
        well-formed row, an oracle data file that is not UTF-8 / JSON): then one line ``main_eval: error: ...``
        naming the file and line goes to stderr.

    Raises:
        SystemExit: bad arguments (status 2, from argparse).
        ValueError: the rows cannot be evaluated (e.g. none left for ``--dataset``; see :func:`evaluate_rows`), or
            an oracle row is malformed (see :func:`oracle_rows`).
    """
    parser = argparse.ArgumentParser(
        description="Tool-call accuracy, BFCL's checker and the RLLA reward of "
        "generations, or of a benchmark's own answers (--oracle)."
    )
    parser.add_argument("--generations", default=None, help="JSONL written by verl.trainer.main_generation")
    parser.add_argument(
        "--dataset",
        default="auto",
        choices=sorted(DATASETS),
        help="auto: every row; rlla / api_bank / bfcl: only rows of that benchmark",
    )
    parser.add_argument(
        "--oracle",
        action="store_true",
        help="score the benchmark's own answers through the same conversion and checker",
    )
    parser.add_argument(
        "--categories",
        default=None,
        help=f"BFCL categories for --oracle, comma-separated (of {', '.join(BFCL_CATEGORIES)}; or of the multi-turn "
        f"{', '.join(MULTI_TURN_CATEGORIES)})",
    )
    parser.add_argument("--data-path", default=None, help="API-Bank JSON or RLLA parquet for --oracle")
    parser.add_argument("--max-rows", type=int, default=None, help="--oracle: the first N rows (per BFCL category)")
    parser.add_argument(
        "--baseline",
        default=None,
        help="generations of another model on the same prompts: adds a paired comparison "
        "(per-prompt gain, its standard error, sign test) to the summary; two BFCL files are "
        "paired on BFCL's verdicts (bfcl_accuracy), overall and per category",
    )
    parser.add_argument(
        "--tool-format",
        default="toolrl",
        choices=sorted(TOOL_FORMATS),
        help="how the responses write tool calls (RLLA/API-Bank rows; the RLLA reward always reads ToolRL's format)",
    )
    parser.add_argument("--max-model-len", type=int, default=None, help="BFCL multi-turn: prompt + response tokens")
    parser.add_argument("--oracle-control", default=None, choices=CONTROLS, help="BFCL multi-turn: negative control")
    parser.add_argument("--model", default=None, help="BFCL multi-turn: a model (preset or path) plays the rows")
    parser.add_argument("--max-tokens-per-turn", type=int, default=None, help="BFCL multi-turn: one turn's tokens")
    parser.add_argument("--output", default=None, help="summary JSON (default: <generations>.summary.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("VERL_LOG_LEVEL", "INFO"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.dataset == "bfcl" and wants_multi_turn(args.categories):  # verl.trainer.eval_bfcl_multi_turn
        return main_multi_turn(args, parser)
    if args.oracle == bool(args.generations):
        parser.error("give exactly one of --generations FILE or --oracle")
    if args.max_model_len or args.oracle_control or args.model or args.max_tokens_per_turn:
        parser.error(
            "--max-model-len, --oracle-control, --model, --max-tokens-per-turn: only with multi-turn BFCL "
            "--categories (multi_turn_*)"
        )
    if not args.oracle:
        given = [f"--{k.replace('_', '-')}" for k in ("categories", "data_path", "max_rows") if getattr(args, k)]
        if given:
            parser.error(f"{', '.join(given)}: only with --oracle (generations carry their own rows)")
    if args.oracle:
        if not args.output:
            parser.error("--oracle needs --output")
        if args.dataset == "auto":
            parser.error("--oracle needs --dataset bfcl, api_bank or rlla")
        if args.categories and args.dataset != "bfcl":
            parser.error("--categories: only with --dataset bfcl")
        if args.data_path and args.dataset == "bfcl":
            parser.error("--data-path: BFCL's data come from the bfcl-eval package (choose --categories)")
        if args.baseline:
            parser.error("--baseline: only with --generations")
    # unreadable input: one line naming file and line, exit status 2 (every error of read_generations is about the
    # file; the oracle's loaders also raise ValueError for other reasons, e.g. a category without answers)
    input_errors = (FileNotFoundError, JsonInputError) if args.oracle else (FileNotFoundError, ValueError)
    try:
        if args.oracle:
            rows, notes = oracle_rows(args.dataset, args.data_path, args.categories, args.max_rows)
        else:
            rows = read_generations(args.generations)
            baseline = read_generations(args.baseline) if args.baseline else None
    except input_errors as err:
        sys.stderr.write(f"main_eval: error: {err}\n")
        return 2
    if args.oracle:
        summary = {"oracle": True, **evaluate_rows(rows, args.dataset), **notes}
        summary["summary_path"] = str(args.output)
        atomic_write_text(args.output, json.dumps(summary, indent=2) + "\n")
    else:
        extra = None
        if baseline is not None:
            bfcl = args.dataset == "bfcl" or (
                args.dataset == "auto" and all("bfcl_id" in r for r in rows) and all("bfcl_id" in r for r in baseline)
            )
            if bfcl:  # BFCL files: BFCL's checker's verdict per row, paired (an unreadable row names its file:line)
                try:
                    pair = [
                        [{**r, "_bfcl_valid": v["valid"]} for r, v in zip(table, check_bfcl_rows(table))]
                        for table in (baseline, rows)
                    ]
                except ValueError as err:
                    sys.stderr.write(f"main_eval: error: {err}\n")
                    return 2
                metric = lambda row: {"bfcl_accuracy": float(row["_bfcl_valid"])}  # noqa: E731
            else:
                switches = RewardSwitches.from_env()
                pair = [baseline, rows]
                metric = lambda row: row_metrics(row, switches, tool_format=args.tool_format)  # noqa: E731
            try:
                paired = paired_comparison(*pair, metric, bfcl=bfcl)
            except ValueError as err:  # the two files are not of the same prompts: a usage error, named
                sys.stderr.write(f"main_eval: error: --baseline {args.baseline}: {err}\n")
                return 2
            extra = {"baseline": str(args.baseline), "paired": paired}
            for name, st in paired["metrics"].items():
                se = "n/a" if st["se"] is None else f"{st['se']:.4f}"
                logger.info(
                    "paired %s: %.4f -> %.4f, gain %+.4f (se %s), wins/losses/ties %d/%d/%d, sign test p=%.3g",
                    name,
                    st["before"],
                    st["after"],
                    st["gain"],
                    se,
                    st["wins"],
                    st["losses"],
                    st["ties"],
                    st["sign_test_p"],
                )
        try:  # a row the scorers cannot read (e.g. a ground truth's unreadable <tool_call>) names its file:line
            summary = evaluate_file(
                args.generations, args.dataset, args.output, rows=rows, extra=extra, tool_format=args.tool_format
            )
        except ValueError as err:
            sys.stderr.write(f"main_eval: error: {err}\n")
            return 2
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
