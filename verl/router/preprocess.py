"""Offline weak labels for router training (spec "Weak labels (optional, offline)"; seed §2).

``python -m verl.router.preprocess --data_dir DIR [--tool_family_file F] [--other_as search|calculate|none]`` reads
``DIR/train.parquet`` and ``DIR/test.parquet`` (those present) and writes ``DIR/train_router.parquet`` /
``DIR/test_router.parquet``: the same rows and columns with

- a new string column ``router_target_action`` ∈ {ANSWER, SEARCH, CALCULATE, MIXED} (:func:`weak_label`), and
- a new ``extra_info.tool_families`` field: a JSON string ``{tool_name: "SEARCH"|"CALCULATE"|"OTHER"}`` in the order
  of the row's ``**Available Tools**`` block (sidecar file > heuristic). A JSON string, not a struct, because every
  row lists different tools.

All other columns and Arrow types are left as they are (the RLLA schema otherwise unchanged). Files are written
atomically (temporary file + rename).

Weak label of a ground truth (tool usage parsed as for the router cost, :func:`verl.router.cost.response_tool_usage`,
thoughts ignored): no ``<tool_call>`` → ANSWER; every call goes to a SEARCH-route tool → SEARCH; every call to a
CALCULATE-route tool → CALCULATE; otherwise (both routes, an ``OTHER`` tool with ``other_as=none``, or a call block
that cannot be read) → MIXED.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from verl.router import MIXED_LABEL, RouterAction, ToolFamily, parse_other_as
from verl.router.cost import response_tool_usage
from verl.router.families import (
    TOOL_FAMILIES_KEY,
    block_families,
    load_tool_family_file,
    parse_tools_block,
    system_text_of,
)
from verl.utils.dataset.rlla_data import write_parquet_atomic

logger = logging.getLogger(__name__)

LABEL_COLUMN = "router_target_action"
SPLITS = ("train", "test")


def weak_label(
    ground_truth: str, families: Mapping[str, ToolFamily], other_as: Optional[RouterAction] = RouterAction.SEARCH
) -> str:
    """Weak route label of one ground truth (rules in the module docstring).

    Returns: ``"ANSWER"``, ``"SEARCH"``, ``"CALCULATE"`` or ``"MIXED"``.
    """
    usage = response_tool_usage(ground_truth, families, other_as)
    if not usage.used_any_tool:
        return RouterAction.ANSWER.name
    if usage.num_calls == 0 or usage.num_invalid_calls > 0:
        return MIXED_LABEL
    if usage.num_search_calls == usage.num_calls:
        return RouterAction.SEARCH.name
    if usage.num_calculate_calls == usage.num_calls:
        return RouterAction.CALCULATE.name
    return MIXED_LABEL


def label_table(
    table: pa.Table,
    overrides: Optional[Mapping[str, ToolFamily]] = None,
    other_as: Optional[RouterAction] = RouterAction.SEARCH,
    source: str = "<table>",
) -> pa.Table:
    """Add ``router_target_action`` and ``extra_info.tool_families`` to an RLLA table (replacing earlier ones).

    Raises:
        ValueError: a required column (``prompt``, ``reward_model``, ``extra_info``) is missing, or a row lacks a
            ground truth (the message names ``source``, the row and the key).
    """
    for column in ("prompt", "reward_model", "extra_info"):
        if column not in table.column_names:
            raise ValueError(f"{source}: missing column {column!r}; columns are {table.column_names}")
    prompts = table.column("prompt").to_pylist()
    rewards = table.column("reward_model").to_pylist()
    labels, family_json = [], []
    for row, (prompt, reward) in enumerate(zip(prompts, rewards)):
        ground_truth = reward.get("ground_truth") if isinstance(reward, Mapping) else None
        if not isinstance(ground_truth, str):
            raise ValueError(f"{source}:{row}: reward_model.ground_truth: expected a string, got {ground_truth!r:.60}")
        families = block_families(parse_tools_block(system_text_of(prompt or [])), overrides)
        labels.append(weak_label(ground_truth, families, other_as))
        family_json.append(json.dumps({name: fam.value for name, fam in families.items()}, ensure_ascii=False))

    extra = table.column("extra_info").combine_chunks()
    if not pa.types.is_struct(extra.type):
        raise ValueError(f"{source}: extra_info must be a struct column, got {extra.type}")
    names = [f.name for f in extra.type if f.name != TOOL_FAMILIES_KEY]
    arrays = [extra.field(n) for n in names] + [pa.array(family_json, pa.string())]
    new_extra = pa.StructArray.from_arrays(arrays, names=names + [TOOL_FAMILIES_KEY], mask=extra.is_null())
    table = table.set_column(table.column_names.index("extra_info"), "extra_info", new_extra)
    if LABEL_COLUMN in table.column_names:
        table = table.drop_columns([LABEL_COLUMN])
    return table.append_column(LABEL_COLUMN, pa.array(labels, pa.string()))


def preprocess_dir(
    data_dir: str | os.PathLike,
    tool_family_file: Optional[str | os.PathLike] = None,
    other_as: Optional[RouterAction] = RouterAction.SEARCH,
    splits: Sequence[str] = SPLITS,
) -> dict[str, dict]:
    """Write ``<split>_router.parquet`` for every ``<split>.parquet`` present in ``data_dir``.

    Returns:
        ``{split: {"path": output path, "labels": {label: count}}}``.

    Raises:
        FileNotFoundError: ``data_dir`` has none of the split files (or the sidecar file is missing).
        ValueError: a malformed row or sidecar entry (file, row / tool named).
    """
    data_dir = Path(data_dir)
    overrides = load_tool_family_file(tool_family_file) if tool_family_file else None
    out: dict[str, dict] = {}
    for split in splits:
        src = data_dir / f"{split}.parquet"
        if not src.is_file():
            logger.warning("router preprocess: %s not found, skipped", src)
            continue
        table = label_table(pq.read_table(src), overrides, other_as, source=str(src))
        dst = data_dir / f"{split}_router.parquet"
        write_parquet_atomic(table, dst)
        counts = dict(Counter(table.column(LABEL_COLUMN).to_pylist()))
        logger.info("router preprocess: wrote %s (%d rows), labels %s", dst, table.num_rows, counts)
        out[split] = {"path": dst, "labels": counts}
    if not out:
        raise FileNotFoundError(f"router preprocess: none of {[f'{s}.parquet' for s in splits]} in {data_dir}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl.router.preprocess", description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", required=True, help="folder with train.parquet / test.parquet")
    parser.add_argument("--tool_family_file", default=None, help="sidecar JSON {tool_name: SEARCH|CALCULATE|OTHER}")
    parser.add_argument("--other_as", default="search", help="route of OTHER tools: search, calculate or none")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = preprocess_dir(args.data_dir, args.tool_family_file, parse_other_as(args.other_as))
    for split, info in result.items():
        logger.info("%s: %s", split, json.dumps(info["labels"], sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
