"""Checks that run before any model is built, so a bad file or path fails in seconds with its name, not after a model
load or in the middle of a run.

- :func:`check_data_files`: every ``data.train_files`` / ``data.val_files`` file opens as parquet, has rows, and every
  row passes the schema check of ``validate-data`` (:func:`verl.utils.dataset.validate_data.row_problems`, ground
  truth included). Files are scanned whole: :class:`~verl.utils.dataset.rl_dataset.RLHFDataset` reads them whole
  into memory anyway, so a file the trainer can hold is a file it can scan (~10 µs a row).
- :func:`check_prompt_lengths`: with ``data.truncation=error`` and no ``filter_overlong_prompts``, every prompt fits
  ``data.max_prompt_length`` (the length pass of ``filter_overlong_prompts``, run once at load), else an error naming
  the file and row of each over-long prompt — instead of a ``PromptTooLongError`` at the step that draws the row.

Both raise :class:`DataCheckError`, which ``main_ppo`` prints as one line (exit status 2).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

from omegaconf import DictConfig

logger = logging.getLogger(__name__)

MAX_LISTED = 10  # problems listed in one error message; the count says how many more


class DataCheckError(ValueError):
    """A data file cannot be trained on; the message names the config key, the file and the rows."""


def _files(config: DictConfig, key: str) -> list[str]:
    files = config.data.get(key)
    if files is None:
        return []
    return [os.path.expanduser(str(f)) for f in ([files] if isinstance(files, str) else list(files))]


def _listed(problems: list[str]) -> str:
    more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    return "\n  " + "\n  ".join(problems[:MAX_LISTED]) + more


def check_data_files(config: DictConfig) -> dict[str, int]:
    """Open every data file of ``config.data.{train,val}_files`` and check every row's schema.

    Skipped in agent mode (``env.env_name`` set: tasks come from environments, not files).

    Returns:
        ``{file: rows}`` for every file checked.

    Raises:
        DataCheckError: a file is missing, is not readable parquet (pyarrow's message kept), has no rows, or has rows
            that fail the schema check; the message names the key (``data.train_files``), the file, and each row as
            ``file:row: key: problem`` (first ``MAX_LISTED``), and points at ``validate-data``.
    """
    import pyarrow.parquet as pq

    from verl.utils.dataset.validate_data import file_row_problems

    if config.env.env_name:
        return {}
    prompt_key = config.data.prompt_key
    rows_per_file: dict[str, int] = {}
    for key in ("train_files", "val_files"):
        for path in _files(config, key):
            if not os.path.isfile(path):
                raise DataCheckError(f"data.{key}: file not found: {path}")
            try:
                rows = pq.read_table(path).to_pylist()
            except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
                raise DataCheckError(f"data.{key}: {path} is not a readable parquet file ({exc})") from None
            if not rows:
                raise DataCheckError(f"data.{key}: {path} has no rows: there is nothing to train or validate on")
            problems, _ = file_row_problems(path, rows, prompt_key)
            if problems:
                raise DataCheckError(
                    f"data.{key}: {len(problems)} problem(s) in {path} (row numbers from 0):"
                    f"{_listed(problems)}\nFix the rows (`validate-data {path}` lists them all)."
                )
            if key == "train_files":
                _check_weak_labels(config, path, rows)
            rows_per_file[path] = len(rows)
    if rows_per_file:
        logger.info("data check: %s", ", ".join(f"{Path(p).name} {n} rows" for p, n in rows_per_file.items()))
    return rows_per_file


def _is_weak_label(value) -> bool:
    """Whether a ``router_target_action`` value labels its row (None, NaN, ``""`` and -1 are "unlabelled", as
    ``verl.router.target_action_ids`` reads them)."""
    if value is None or value == "" or value == -1:
        return False
    return not (isinstance(value, float) and math.isnan(value))


def _check_weak_labels(config: DictConfig, path: str, rows: list[dict]) -> None:
    """``router.sup_coeff > 0`` pulls the router towards the rows' weak labels (``router_target_action``, written by
    ``python -m verl.router.preprocess``): a training file without any would train with a supervised loss of 0.

    Raises:
        DataCheckError: the router is on with ``sup_coeff > 0`` and no row of ``path`` has a weak label.
    """
    router = config.get("router")
    if router is None or not router.get("enable") or not float(router.get("sup_coeff") or 0.0) > 0:
        return
    if any(_is_weak_label(row.get("router_target_action")) for row in rows):
        return
    raise DataCheckError(
        f"data.train_files: router.sup_coeff={router.sup_coeff} trains the router towards weak labels (the column "
        f"router_target_action), and no row of {path} has one. Use the router's files (leave data.train_files "
        f"unset: train_router.parquet is written next to the RLLA data), add the column with `python -m "
        f"verl.router.preprocess --data_dir DIR`, or set router.sup_coeff=0"
    )


def check_prompt_lengths(config: DictConfig, datasets: dict) -> None:
    """Under ``data.truncation=error`` (without ``filter_overlong_prompts``), refuse datasets holding prompts longer
    than ``data.max_prompt_length`` at load.

    Args:
        datasets: ``{config key: RLHFDataset}``, e.g. ``{"data.train_files": train, "data.val_files": val}``.

    Raises:
        DataCheckError: names the key and every over-long prompt as ``file:row: N tokens`` (first ``MAX_LISTED``).
    """
    if config.data.truncation != "error" or config.data.filter_overlong_prompts:
        return
    limit = int(config.data.max_prompt_length)
    for key, dataset in datasets.items():
        over = [
            f"{file}:{row}: {n} tokens"
            for (file, row), n in zip(dataset.origins(), dataset.prompt_lengths())
            if n > limit
        ]
        if over:
            raise DataCheckError(
                f"{key}: {len(over)} prompt(s) longer than data.max_prompt_length={limit} with "
                f"data.truncation=error:{_listed(over)}\nRaise data.max_prompt_length, set "
                "data.filter_overlong_prompts=true (drops them) or data.truncation=left (keeps the "
                "last tokens, as ToolRL's trainer)."
            )
