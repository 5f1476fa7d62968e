"""The API-Bank evaluation sets (as processed by ToolRL) turned into RLLA-schema rows.

Default file: ``data/api_bank/level-1-api_processed.json`` in the shared reference folder (``$TOOLRL_SHARED``, by
default the folder ``shared`` beside the checkout) — a JSON list of 399 objects::

    {"system": str,                        # RLLA-style instruction with the available tools and the output format
     "user":   str,                        # "**Dialogue Records History** <user>…</user> <response>…</response> …"
     "answer": [{"name": str, "parameters": {str: value}}],   # the ground-truth tool call(s)
     "other":  {"file": str, "id": int}}   # provenance in the original API-Bank release

In the shared file every ``answer`` holds exactly one call (level-1: one API call per dialogue), all parameter values
are strings, and 6 calls have no parameters. ToolRL's other level files differ in form: level 2 (67 rows) gives
``answer`` as one call object instead of a list, level 3 (131 rows) lists its tools as ``<n>. Name: description``
and its ``other`` as ``{sample_id, api_id}``. The loader accepts every form — a non-empty list of calls or one call
object (read as a one-call list) — and names the row and key it could not read.

Each row becomes an RLLA row (``verl.utils.dataset.rlla_data.make_rlla_row``): the prompt is
``[{system}, {user}]`` and the ground truth is the answer written in the RLLA output format — ToolRL's tool-call think
placeholder, then one ``json.dumps`` line per call inside ``<tool_call>`` — so the RLLA reward and the tool-call
parser read it exactly like an RLLA ground truth. ``data_source`` is ``"rlla_api_bank"``: it contains ``"rlla"`` so
``default_compute_score`` scores it with the RLLA reward (e.g. as a ``main_ppo`` validation file), and it tells the
two sets apart in generation outputs.

CLI: ``python -m verl.utils.dataset.api_bank [--input JSON] --output api_bank.parquet`` writes the rows as a parquet
file with the RLLA Arrow schema.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from verl.utils.dataset.rlla_data import TOOL_CALL_THINK_PLACEHOLDER, default_shared_dir, make_rlla_row, \
    write_rlla_parquet
from verl.utils.jsonl import JsonInputError, load_json_file

logger = logging.getLogger(__name__)

API_BANK_DATA_SOURCE = "rlla_api_bank"
API_BANK_RELATIVE_PATH = Path("data") / "api_bank" / "level-1-api_processed.json"


def default_api_bank_path() -> Path:
    """``<shared>/data/api_bank/level-1-api_processed.json``, where ``<shared>`` is ``$TOOLRL_SHARED`` or the folder
    ``shared`` beside the checkout (:func:`~verl.utils.dataset.rlla_data.default_shared_dir`)."""
    return default_shared_dir() / API_BANK_RELATIVE_PATH


def _call_problem(call: Any) -> str | None:
    """Why ``call`` is not a ``{"name": str, "parameters": dict}`` object, or None when it is."""
    if not isinstance(call, Mapping):
        return f"expected a {{name, parameters}} object, got {type(call).__name__}"
    if not isinstance(call.get("name"), str) or not call["name"].strip():
        return f"name: expected a non-empty string, got {call.get('name')!r:.60}"
    if not isinstance(call.get("parameters"), Mapping):
        return f"parameters: expected an object, got {type(call.get('parameters')).__name__}"
    return None


def answer_calls(row: Mapping) -> list:
    """The row's ``answer`` as a list of calls (level 2 gives one call object)."""
    answer = row.get("answer")
    return [answer] if isinstance(answer, Mapping) else answer


def check_api_bank_row(row: Any, where: str) -> None:
    """Validate one API-Bank row.

    Raises:
        ValueError: ``row`` is not an object, ``system``/``user`` is not a non-empty string, or ``answer`` is not a
            non-empty list of ``{name, parameters}`` objects; the message starts with ``where`` and names the key.
    """
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected an object with system/user/answer, got {type(row).__name__}")
    for key in ("system", "user"):
        value = row.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: {key}: expected a non-empty string, got {value!r:.80}")
    answer = answer_calls(row)
    if not isinstance(answer, list) or not answer:
        raise ValueError(f"{where}: answer: expected a non-empty list of tool calls or one call object, got "
                         f"{answer!r:.80}")
    for i, call in enumerate(answer):
        problem = _call_problem(call)
        if problem:
            raise ValueError(f"{where}: answer[{i}]: {problem}")


def load_api_bank(path: str | os.PathLike | None = None) -> list[dict]:
    """Read and validate the API-Bank JSON file (default: :func:`default_api_bank_path`).

    Returns:
        The rows (dicts with ``system``, ``user``, ``answer``, ``other``), ``answer`` always a list of calls.

    Raises:
        FileNotFoundError: the file does not exist.
        JsonInputError: not UTF-8 or not JSON (a ``ValueError``: ``file PATH, line N: not an API-Bank JSON file: ...``).
        ValueError: not a list, or a row is malformed (``file:row: key: problem``).
    """
    path = Path(path) if path is not None else default_api_bank_path()
    if not path.is_file():
        raise FileNotFoundError(f"API-Bank file {path} not found")
    try:
        rows = load_json_file(path)
    except JsonInputError as err:
        raise JsonInputError(path, err.line, f"not an API-Bank JSON file: {err.problem}") from err
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a JSON list of {{system, user, answer}} objects, got {type(rows).__name__}")
    out = []
    for i, row in enumerate(rows):
        check_api_bank_row(row, f"{path}:{i}")
        out.append({**row, "answer": answer_calls(row)})
    return out


def tool_calls_to_ground_truth(calls: Sequence[Mapping]) -> str:
    """Ground-truth text in the RLLA output format for ``calls``::

        <think> I should use the appropriate tool with proper parameters to respond to the user's need. </think>
        <tool_call>
        {"name": "...", "parameters": {...}}
        </tool_call>

    One ``json.dumps`` line per call (``{"name", "parameters"}`` only, in that key order), as in ToolRL's RLLA ground
    truths, so ``rlla.parse_ground_truth_tools`` returns ``calls`` back.

    Raises:
        ValueError: ``calls`` is empty or a call is malformed.
    """
    if not calls:
        raise ValueError("tool_calls_to_ground_truth: no tool calls")
    lines = []
    for i, call in enumerate(calls):
        problem = _call_problem(call)
        if problem:
            raise ValueError(f"tool_calls_to_ground_truth: call {i}: {problem}")
        lines.append(json.dumps({"name": call["name"], "parameters": dict(call["parameters"])}, ensure_ascii=False))
    body = "\n".join(lines)
    return f"<think> {TOOL_CALL_THINK_PLACEHOLDER} </think>\n<tool_call>\n{body}\n</tool_call>"


def make_api_bank_row(row: Mapping, index: int) -> dict:
    """One API-Bank row → one RLLA-schema row (``data_source="rlla_api_bank"``, ``split="test"``, ``index``)."""
    check_api_bank_row(row, f"API-Bank row {index}")
    example = {"instruction": row["system"], "input": row["user"],
               "output": tool_calls_to_ground_truth(answer_calls(row))}
    out = make_rlla_row(example, index, split="test")
    out["data_source"] = API_BANK_DATA_SOURCE
    return out


def api_bank_rlla_rows(path: str | os.PathLike | None = None) -> list[dict]:
    """All rows of the API-Bank file as RLLA-schema rows (``index`` = position in the file)."""
    return [make_api_bank_row(row, i) for i, row in enumerate(load_api_bank(path))]


def write_api_bank_parquet(output: str | os.PathLike, path: str | os.PathLike | None = None) -> Path:
    """Write :func:`api_bank_rlla_rows` to ``output`` (RLLA Arrow schema, atomic). Returns the written path."""
    return write_rlla_parquet(api_bank_rlla_rows(path), output)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: convert the API-Bank JSON file to an RLLA-schema parquet file and print its path."""
    parser = argparse.ArgumentParser(description="Convert ToolRL's API-Bank level-1 JSON to an RLLA parquet file.")
    parser.add_argument("--input", default=None, help=f"API-Bank JSON (default: <shared>/{API_BANK_RELATIVE_PATH})")
    parser.add_argument("--output", required=True, help="parquet file to write")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(write_api_bank_parquet(args.output, args.input))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
