"""``validate-data``: check RL parquet files against the ToolRL/verl row schema and report token lengths.

Usage::

    validate-data FILE.parquet [FILE ...] [--tokenizer tiny|DIR|none] [--max_prompt_length N] [--prompt_key KEY]

Schema (``docs/verl_compat.md`` "RLLA row schema", ToolRL's ``rlla.py``): ``data_source`` a non-empty string; the
prompt a non-empty list of ``{role, content}`` with non-empty strings; ``ability`` a string; ``reward_model`` an object
with a non-empty string ``ground_truth`` whose tool calls the RLLA reward can parse (rows of an RLLA data source: the
reward's own parser reads its first ``<tool_call>`` block, one JSON value per line); ``extra_info`` an object with an
int ``index``; ``route_qa`` rows also its ``kind``, ``subkind``, ``needs_tool`` and answering ``call``
(:func:`verl.utils.dataset.route_qa.extra_info_problems`).

Prints, per file, the row count and token-length statistics (count, median, p90, max) of the chat-templated prompts
(as :class:`~verl.utils.dataset.rl_dataset.RLHFDataset` builds them) and of the ground truths, plus how many prompts
exceed ``--max_prompt_length``. Exits 1 when any row is invalid, listing each problem as ``file:row: key: problem``.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow.parquet as pq

from verl.utils.dataset.rl_dataset import message_list_problems, prompt_text
from verl.utils.reward_score.route_qa import DATA_SOURCE as ROUTE_QA

MAX_ERRORS_SHOWN = 50


def _non_empty_str(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if not value.strip():
        return "empty string"
    return None


def _tool_call_problem(ground_truth: str) -> str | None:
    """Why the RLLA reward cannot read the ground truth's tool calls (its own parser,
    ``verl.utils.reward_score.rlla.parse_ground_truth_tools``), or None. Such a row would fail at reward time on
    every sample."""
    from verl.utils.reward_score.rlla import InvalidGroundTruthError, parse_ground_truth_tools
    from verl.utils.reward_score.tool_parse import TOOL_CALL, open_tag

    if open_tag(TOOL_CALL) not in ground_truth:  # no tool call: the reward's correctness term is 0, nothing to parse
        return None
    try:
        parse_ground_truth_tools(ground_truth)
    except InvalidGroundTruthError as err:
        return str(err).removeprefix("invalid ground truth: ")[:300]
    except RecursionError:
        return "its <tool_call> JSON nests too deep to parse"
    return None


def row_problems(row: dict, prompt_key: str = "prompt") -> list[tuple[str, str]]:
    """Schema problems of one row (plain Python values) as ``[(key, problem), …]``; empty when the row is valid."""
    problems: list[tuple[str, str]] = []
    for key in ("data_source", prompt_key, "ability", "reward_model", "extra_info"):
        if key not in row:
            problems.append((key, "missing"))
    if "data_source" in row and (p := _non_empty_str(row["data_source"])):
        problems.append(("data_source", p))
    if prompt_key in row:
        problems.extend(message_list_problems(row[prompt_key], prompt_key))
    if "ability" in row and not isinstance(row["ability"], str):
        problems.append(("ability", f"expected a string, got {type(row['ability']).__name__}"))
    if "reward_model" in row:
        rm = row["reward_model"]
        if not isinstance(rm, dict):
            problems.append(("reward_model", f"expected an object, got {type(rm).__name__}"))
        elif p := _non_empty_str(rm.get("ground_truth")):
            problems.append(("reward_model.ground_truth", p if "ground_truth" in rm else "missing"))
        elif isinstance(row.get("data_source"), str) and "rlla" in row["data_source"]:
            if p := _tool_call_problem(rm["ground_truth"]):
                problems.append(("reward_model.ground_truth", p))
    if "extra_info" in row:
        extra = row["extra_info"]
        if not isinstance(extra, dict):
            problems.append(("extra_info", f"expected an object, got {type(extra).__name__}"))
        elif "index" not in extra or extra["index"] is None:
            problems.append(("extra_info.index", "missing"))
        elif not isinstance(extra["index"], int) or isinstance(extra["index"], bool):
            problems.append(("extra_info.index", f"expected an int, got {type(extra['index']).__name__}"))
        if isinstance(extra, dict) and row.get("data_source") == ROUTE_QA:
            from verl.utils.dataset.route_qa import extra_info_problems

            problems.extend(extra_info_problems(extra))
    return problems


def file_row_problems(path: str | Path, rows: Sequence[dict], prompt_key: str = "prompt"
                      ) -> tuple[list[str], list[dict]]:
    """Schema check of a file's rows (:func:`row_problems`): ``(problems, valid rows)``, each problem as
    ``"file:row: key: problem"`` (rows counted from 0)."""
    problems, valid = [], []
    for i, row in enumerate(rows):
        found = row_problems(row, prompt_key)
        problems.extend(f"{path}:{i}: {key}: {problem}" for key, problem in found)
        if not found:
            valid.append(row)
    return problems, valid


def length_stats(lengths: Sequence[int]) -> dict[str, float]:
    """``{count, median, p90, max}`` of token lengths (numpy's linear-interpolation percentiles); zeros when empty."""
    if len(lengths) == 0:
        return {"count": 0, "median": 0.0, "p90": 0.0, "max": 0}
    arr = np.asarray(lengths)
    return {"count": int(arr.size), "median": float(np.median(arr)), "p90": float(np.percentile(arr, 90)),
            "max": int(arr.max())}


def _format_stats(name: str, s: dict[str, float]) -> str:
    return f"  {name:<13} count={s['count']} median={s['median']:.0f} p90={s['p90']:.0f} max={s['max']}"


def validate_file(path: str | Path, tokenizer=None, max_prompt_length: int = 1024, prompt_key: str = "prompt"
                  ) -> tuple[list[str], dict]:
    """Validate one parquet file.

    Returns ``(errors, report)``: ``errors`` are ``"file:row: key: problem"`` lines; ``report`` holds ``rows`` and,
    with a tokenizer, ``prompt_tokens`` / ``ground_truth_tokens`` (:func:`length_stats`) and ``over_max_prompt``
    (computed over the valid rows only).
    """
    path = Path(path)
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        return [f"{path}: not a readable parquet file: {exc}"], {"rows": 0}
    if not rows:  # a training file without rows would "validate" and then train on nothing
        return [f"{path}: no rows (an empty file cannot be trained or validated on)"], {"rows": 0}
    errors, valid = file_row_problems(path, rows, prompt_key)
    report: dict = {"rows": len(rows), "valid_rows": len(valid)}
    if tokenizer is not None and valid:
        prompts = [prompt_text(tokenizer, [dict(m) for m in r[prompt_key]]) for r in valid]
        truths = [r["reward_model"]["ground_truth"] for r in valid]
        p_len = [len(x) for x in tokenizer(prompts, add_special_tokens=False)["input_ids"]]
        g_len = [len(x) for x in tokenizer(truths, add_special_tokens=False)["input_ids"]]
        report.update(prompt_tokens=length_stats(p_len), ground_truth_tokens=length_stats(g_len),
                      over_max_prompt=sum(n > max_prompt_length for n in p_len))
    return errors, report


def _load_tokenizer(spec: str):
    if spec.lower() == "none":
        return None
    from transformers import AutoTokenizer

    from verl.utils.model_presets import prepare_model

    return AutoTokenizer.from_pretrained(prepare_model(spec, key="--tokenizer"))


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (console script ``validate-data``); returns the exit status: 0 valid, 1 invalid (the problems
    listed), 2 a usage error (an unknown ``--tokenizer``: one ``validate-data: error:`` line)."""
    parser = argparse.ArgumentParser(prog="validate-data", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="parquet file(s) to check")
    parser.add_argument("--tokenizer", default="tiny",
                        help="model preset or HF directory for token lengths ('none' skips them; default tiny)")
    parser.add_argument("--max_prompt_length", type=int, default=1024,
                        help="count prompts longer than this many tokens (default 1024, RLHFDataset's default)")
    parser.add_argument("--prompt_key", default="prompt")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from verl.utils.model_presets import ModelPathError

    try:
        tokenizer = _load_tokenizer(args.tokenizer)
    except (ModelPathError, OSError) as err:
        print(f"validate-data: error: {err}", file=sys.stderr)
        return 2
    all_errors: list[str] = []
    for file in args.files:
        errors, report = validate_file(file, tokenizer, args.max_prompt_length, args.prompt_key)
        all_errors.extend(errors)
        print(f"{file}: {report['rows']} rows, {report.get('valid_rows', 0)} valid, {len(errors)} problem(s)")
        if "prompt_tokens" in report:
            print(_format_stats("prompt", report["prompt_tokens"]))
            print(_format_stats("ground_truth", report["ground_truth_tokens"]))
            print(f"  prompts over max_prompt_length={args.max_prompt_length}: {report['over_max_prompt']}")
    if all_errors:
        print(f"INVALID: {len(all_errors)} problem(s)", file=sys.stderr)
        for line in all_errors[:MAX_ERRORS_SHOWN]:
            print(line, file=sys.stderr)
        if len(all_errors) > MAX_ERRORS_SHOWN:
            print(f"... and {len(all_errors) - MAX_ERRORS_SHOWN} more", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
