"""The prompts ``python -m verl.router.infer`` routes: one :class:`PromptRow` per row of a parquet (RLLA schema) or
JSONL file, checked as the training data is (each problem named with its file and row).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from verl.utils.dataset.rl_dataset import _extra_info_problems, message_list_problems
from verl.utils.jsonl import iter_json_objects

JSONL_SUFFIXES = (".jsonl", ".json")


@dataclass(frozen=True)
class PromptRow:
    """One input prompt: its chat ``messages``, ``extra_info`` (or None), output ``index`` and ``position`` in its
    file (None: its position in the list given to ``RouterInference.run``)."""

    messages: list[dict]
    extra_info: Optional[Mapping]
    index: int
    ground_truth: Optional[str] = None  # reward_model.ground_truth, passed through for main_eval
    data_source: Optional[str] = None
    position: Optional[int] = None


def load_prompt_rows(path: str | os.PathLike, prompt_key: str = "prompt") -> list[PromptRow]:
    """Read the prompts of a parquet (RLLA schema) or JSONL file (``.jsonl`` / ``.json``).

    ``index`` is ``extra_info["index"]`` when present, else the row position (0-based, blank JSONL lines skipped).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a missing ``prompt_key``, a malformed prompt or ``extra_info``, a JSONL line that is not a JSON
            object, or an empty file (``file:row N: key: problem`` for parquet, ``file:line N: ...`` for JSONL).
    """
    import pandas as pd

    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"--prompts {path}: not found")
    if path.suffix.lower() in JSONL_SUFFIXES:
        located = [(f"{path}:line {n}", record) for n, record in iter_json_objects(path)]
    else:
        try:
            records = pd.read_parquet(path).to_dict("records")
        except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
            raise ValueError(f"--prompts {path}: not a readable parquet file ({str(err).splitlines()[0]})") from None
        located = [(f"{path}:row {n}", record) for n, record in enumerate(records)]
    if not located:
        raise ValueError(f"{path}: no prompts")
    rows = []
    for position, (where, record) in enumerate(located):
        if prompt_key not in record:
            raise ValueError(f"{where}: missing key {prompt_key!r}; keys are {sorted(record)}")
        if record.get("tools") is not None:
            raise ValueError(
                f"{where}: a 'tools' value (tools for the chat template): router inference rewrites the "
                "system prompt's tools block and would drop it; give the tools in the system prompt"
            )
        extra = record.get("extra_info")
        problems = message_list_problems(record[prompt_key], prompt_key) + _extra_info_problems(extra)
        if problems:
            key, problem = problems[0]
            raise ValueError(f"{where}: {key}: {problem}")
        index = int(extra["index"]) if isinstance(extra, Mapping) and "index" in extra else position
        reward_model = record.get("reward_model")
        truth = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
        rows.append(
            PromptRow(
                [dict(m) for m in record[prompt_key]],
                extra,
                index,
                truth if isinstance(truth, str) else None,
                record.get("data_source"),
                position,
            )
        )
    return rows
