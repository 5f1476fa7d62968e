"""Irrelevance rows for router training: RLLA prompts whose tool list holds no tool the question needs.

Why (``docs/router.md`` "Irrelevance rows"): the router's value head learns which route pays from the prompts it is
trained on. In RLLA nearly every prompt wants a tool call (the rows without one mostly lack an argument), so a head
trained there has never seen a prompt whose tools cannot help, and on BFCL it sends its irrelevance rows to the tool
routes as often as the others. BFCL's irrelevance categories ask a question next to functions that cannot answer
it; the right response is no call. This module makes such rows from RLLA's own prompts, in RLLA's format.

Construction of one row, from a source row whose ground truth calls tools (its first ``<tool_call>`` block):

1. The source's ``**Available Tools**`` block (:func:`verl.router.families.parse_tools_block`) without every tool the
   ground truth calls, renumbered from 1; the rest of the system message and the dialogue are kept byte for byte.
2. When no tool is left, the tools of a donor row are used instead: the next row (in the seeded order) none of
   whose tools the source's ground truth calls.
3. Ground truth: RLLA's own no-call form, ``<think> I should directly respond to the user's need. </think>`` and a
   ``<response>`` line. ToolRL's reward then gives the format term for a ``<think>`` + ``<response>`` answer without
   a call, and a correctness term of 0 whatever the response says (``docs/rlla_reward.md``).
4. ``extra_info.index`` continues after the table's largest index; ``extra_info.irrelevance_source`` is the source
   row's ``extra_info.index`` (-1 on the original rows, which are kept unchanged and first); ``extra_info.instruction``
   and ``extra_info.output`` (RLLA's copies of the system message and the answer), where present, are the new ones.

Only the tools the ground truth calls are removed: in a multi-part question a listed tool may still answer another
part, so a few rows are imperfect no-call examples.

``python -m verl.router.irrelevance --input DIR/train_router.parquet --output NEW_DIR/train_router.parquet
--fraction 0.25 --seed 1`` appends ``round(fraction × rows with a call)`` such rows, drawn without replacement with
``random.Random(seed)``, then labels every row again (:func:`verl.router.preprocess.label_table`: the new rows get
the weak label ANSWER and the families of their own tools).

``python -m verl.router.irrelevance --data_dir DIR --fraction 0.25 --seed 1`` is the main job's form
(the trainer calls it for ``router.irrelevance_fraction``, which the router_value_ridge recipe sets): it writes ``DIR/train_router_irrelevance_f0.25_s1.parquet``
from ``DIR/train_router.parquet`` unless that file is already there and was made from the same input with the same
fraction and seed (:func:`prepare_train_file`), and prints its path on stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
from collections import Counter
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from verl.router.families import ToolsBlock, parse_tools_block, system_text_of
from verl.router.preprocess import LABEL_COLUMN, label_table
from verl.utils.dataset.rlla_data import write_parquet_atomic
from verl.utils.reward_score.rlla import parse_ground_truth_tools

logger = logging.getLogger(__name__)

SOURCE_KEY = "irrelevance_source"  # extra_info field: the source row's index, -1 on original rows
BUILD_KEY = b"toolrl.irrelevance"  # parquet schema metadata of prepare_train_file's output: what it was made from
NO_CALL_GROUND_TRUTH = (
    "<think> I should directly respond to the user's need. </think>\n"
    "<response> None of the available tools can do this. </response>"
)


def called_tool_names(ground_truth: str) -> set[str]:
    """Names the ground truth's first ``<tool_call>`` block calls (empty when it has none or a call has no name).

    Raises:
        InvalidGroundTruthError: the block's lines are not JSON (``parse_ground_truth_tools``).
    """
    if "<tool_call>" not in ground_truth:
        return set()
    return {c["name"] for c in parse_ground_truth_tools(ground_truth) if isinstance(c, Mapping) and "name" in c}


def _with_tools(system: str, block: ToolsBlock, entries: Sequence[str]) -> str:
    """``system`` with the entries of its tools block (``block``, parsed from it) replaced by ``entries`` (entry texts
    without numbers), renumbered."""
    head = system[: block.start] + system[block.start : block.end].split("\n")[0]  # the header line
    intro = f"\n{block.intro}" if block.intro else ""
    body = "\n".join(f"{i}. {text}" for i, text in enumerate(entries, start=1))
    return f"{head}{intro}\n{body}{system[block.end :]}"


def irrelevant_prompt(
    prompt: Sequence[Mapping], called: set[str], donors: Sequence[Sequence[Mapping]] = ()
) -> Optional[list[dict]]:
    """The chat ``prompt`` with no tool named in ``called`` (steps 1-2 of the module docstring).

    Args:
        prompt: the row's messages (``[{"role", "content"}, ...]``; the first ``system`` message holds the tools).
        called: the tool names the ground truth calls (:func:`called_tool_names`).
        donors: other rows' prompts, tried in order when no tool of ``prompt`` is left.

    Returns: the new messages (the same roles and order; only the system message changes), or None when the prompt has
        no tools block or neither it nor any donor has a tool outside ``called``.
    """
    system = system_text_of(prompt)
    block = parse_tools_block(system)
    if block is None or not block.tools:
        return None
    kept = [t.text for t in block.tools if t.name not in called]
    for donor in donors if not kept else ():
        donor_block = parse_tools_block(system_text_of(donor))
        if donor_block is not None and donor_block.tools and not called & set(donor_block.names):
            kept = [t.text for t in donor_block.tools]
            break
    if not kept:
        return None
    new_system = _with_tools(system, block, kept)
    out, replaced = [], False
    for message in prompt:
        message = dict(message)
        if message.get("role") == "system" and not replaced:
            message["content"], replaced = new_system, True
        out.append(message)
    return out


def _check_fraction(fraction: float) -> None:
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: expected a number in (0, 1], got {fraction!r}")


def add_irrelevance_rows(table: pa.Table, fraction: float, seed: int = 1, source: str = "<table>") -> pa.Table:
    """``table`` (an RLLA or router parquet table) with irrelevance rows appended and every row labelled again.

    Args:
        table: columns ``prompt``, ``reward_model`` (``ground_truth``), ``extra_info`` (a struct with ``index``).
        fraction: how many rows to add, as a fraction of the rows whose ground truth calls a tool (0 < fraction <= 1).
        seed: ``random.Random`` seed of the draw and of the donor order.
        source: the file's name, for error messages.

    Returns: the original rows first (unchanged but for ``extra_info.irrelevance_source`` = -1 and the labels), then
        the new ones; the labels and tool families of :func:`verl.router.preprocess.label_table`.

    Raises:
        ValueError: ``fraction`` outside (0, 1]; a missing column; a row without an integer ``extra_info.index``;
            fewer usable source rows than asked for (the message names how many there are).
    """
    _check_fraction(fraction)
    for column in ("prompt", "reward_model", "extra_info"):
        if column not in table.column_names:
            raise ValueError(f"{source}: missing column {column!r}; columns are {table.column_names}")
    rows = table.to_pylist()
    for i, row in enumerate(rows):
        if not isinstance((row.get("extra_info") or {}).get("index"), int):
            raise ValueError(
                f"{source}:{i}: extra_info.index: expected an integer, got "
                f"{(row.get('extra_info') or {}).get('index')!r}"
            )
    calls = [called_tool_names(str((r.get("reward_model") or {}).get("ground_truth", ""))) for r in rows]
    with_call = [i for i, c in enumerate(calls) if c]
    want = round(fraction * len(with_call))
    rng = random.Random(seed)
    order = rng.sample(with_call, len(with_call))
    next_index = max(r["extra_info"]["index"] for r in rows) + 1
    new_rows = []
    for position, i in enumerate(order):
        if len(new_rows) == want:
            break
        donors = [rows[j]["prompt"] for j in order[position + 1 :] + order[:position]]
        prompt = irrelevant_prompt(rows[i]["prompt"], calls[i], donors)
        if prompt is None:
            continue
        extra = {
            **rows[i]["extra_info"],
            "index": next_index + len(new_rows),
            SOURCE_KEY: rows[i]["extra_info"]["index"],
        }
        if "instruction" in extra:  # RLLA's copy of the system message
            extra["instruction"] = system_text_of(prompt)
        if "output" in extra:  # ... and of the answer
            extra["output"] = NO_CALL_GROUND_TRUTH
        new_rows.append(
            {
                **rows[i],
                "prompt": prompt,
                "extra_info": extra,
                "reward_model": {**rows[i]["reward_model"], "ground_truth": NO_CALL_GROUND_TRUTH},
            }
        )
    if len(new_rows) < want:
        raise ValueError(
            f"{source}: asked for {want} irrelevance rows, only {len(new_rows)} of the "
            f"{len(with_call)} rows with a tool call could be made into one"
        )
    for row in rows:
        row["extra_info"] = {**row["extra_info"], SOURCE_KEY: -1}
    extra_type = table.schema.field("extra_info").type
    fields = [f for f in extra_type if f.name != SOURCE_KEY] + [pa.field(SOURCE_KEY, pa.int64())]
    schema = table.schema.set(table.schema.get_field_index("extra_info"), pa.field("extra_info", pa.struct(fields)))
    if LABEL_COLUMN in schema.names:  # written again by label_table
        schema = schema.remove(schema.get_field_index(LABEL_COLUMN))
    rows = [{k: v for k, v in r.items() if k != LABEL_COLUMN} for r in rows + new_rows]
    return label_table(pa.Table.from_pylist(rows, schema=schema), source=source)


def prepare_train_file(data_dir: str | Path, fraction: float, seed: int = 1) -> Path:
    """``data_dir/train_router_irrelevance_f{fraction:g}_s{seed}.parquet``: ``data_dir/train_router.parquet`` with
    irrelevance rows (:func:`add_irrelevance_rows`), built once and rebuilt only when its input changed.

    The file's parquet schema metadata (``toolrl.irrelevance``) records the input's name and SHA-256, ``fraction`` and
    ``seed``; a file whose record matches is kept as it is, any other (an edited input, a file from elsewhere, one
    without the record) is written again, atomically. Validation is not touched: the main job keeps reading
    ``data_dir/test_router.parquet``.

    Raises:
        FileNotFoundError: ``data_dir/train_router.parquet`` is missing (``python -m verl.router.preprocess`` makes it).
        ValueError: as :func:`add_irrelevance_rows`.
    """
    _check_fraction(fraction)  # before the file name is formed from it
    source = Path(data_dir) / "train_router.parquet"
    if not source.is_file():
        raise FileNotFoundError(
            f"{source}: no such file (python -m verl.router.preprocess --data_dir {data_dir} writes it)"
        )
    output = Path(data_dir) / f"train_router_irrelevance_f{fraction:g}_s{seed}.parquet"
    record = json.dumps(
        {
            "source": source.name,
            "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
            "fraction": fraction,
            "seed": seed,
        },
        sort_keys=True,
    ).encode()
    if output.is_file() and (pq.read_schema(output).metadata or {}).get(BUILD_KEY) == record:
        logger.info("%s is up to date (made from %s, fraction %g, seed %d)", output, source, fraction, seed)
        return output
    table = add_irrelevance_rows(pq.read_table(source), fraction, seed, source=str(source))
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), BUILD_KEY: record})
    write_parquet_atomic(table, output)
    _log_written(output, table)
    return output


def _log_written(path: str | Path, table: pa.Table) -> None:
    sources = table.column("extra_info").combine_chunks().field(SOURCE_KEY).to_pylist()
    labels = Counter(table.column(LABEL_COLUMN).to_pylist())
    logger.info(
        "wrote %s: %d rows (%d irrelevance rows added), labels %s",
        path,
        table.num_rows,
        sum(s >= 0 for s in sources),
        json.dumps(dict(sorted(labels.items()))),
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl.router.irrelevance", description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--input", help="an RLLA or router parquet file (e.g. DIR/train_router.parquet); needs --output")
    where.add_argument(
        "--data_dir",
        help="a folder holding train_router.parquet: writes (or keeps, when up to date) "
        "train_router_irrelevance_f<F>_s<S>.parquet there and prints its path",
    )
    parser.add_argument("--output", help="with --input: where to write the table with the new rows")
    parser.add_argument(
        "--fraction",
        type=float,
        required=True,
        help="rows to add, as a fraction of the rows whose ground truth calls a tool",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if (args.input is None) != (args.output is None):
        parser.error("--output goes with --input, and only with it")
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # on stderr: stdout holds only the path
    if args.data_dir is not None:
        print(prepare_train_file(args.data_dir, args.fraction, args.seed))
        return 0
    table = add_irrelevance_rows(pq.read_table(args.input), args.fraction, args.seed, source=args.input)
    write_parquet_atomic(table, args.output)
    _log_written(args.output, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
