"""ToolRL's RLLA preprocessing: raw ``{instruction, input, output}`` JSON → ``train.parquet`` / ``test.parquet``.

Same rows, order and split as ToolRL's ``dataset/rlla_4k_raw/rlla.py`` (``../shared/specs/verl_compat.md`` §4):
``np.random.seed(31415)`` + shuffle, the last ``int(0.02·N)`` rows become the test split, each split indexed from 0,
rows in ToolRL's schema with the Arrow types of its published files (see ``verl.utils.dataset.rlla_data``).

Usage (from the repository root; ToolRL's defaults)::

    python dataset/rlla_4k_raw/rlla.py --input dataset/rlla_4k_raw/rlla_rl.json --local_dir dataset/rlla_4k

Importable: ``preprocess(input_path, local_dir, seed=31415, test_frac=0.02)`` (load this file with
``importlib`` or put ``dataset/rlla_4k_raw`` on ``sys.path``). Output files are written atomically.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parents[1]) not in sys.path:  # run as a script from anywhere: make the repo's ``verl`` importable
    sys.path.insert(0, str(HERE.parents[1]))

from verl.utils.dataset.rlla_data import (  # noqa: E402
    TOOLRL_SEED,
    TOOLRL_TEST_FRAC,
    load_raw_records,
    make_rlla_row,
    shuffle_and_split,
    write_rlla_parquet,
)

logger = logging.getLogger(__name__)


def preprocess(input_path: str | os.PathLike, local_dir: str | os.PathLike, seed: int = TOOLRL_SEED,
               test_frac: float = TOOLRL_TEST_FRAC) -> dict[str, Path]:
    """Convert a raw RLLA JSON file into ToolRL's ``train.parquet`` and ``test.parquet`` under ``local_dir``.

    Returns ``{"train": path, "test": path}``. Raises FileNotFoundError for a missing input and ValueError (naming
    the file, row and key) for a malformed record or a ``test_frac`` outside [0, 1).
    """
    records = load_raw_records(input_path)
    train, test = shuffle_and_split(records, seed=seed, test_frac=test_frac)
    local_dir = Path(local_dir)
    out = {
        "train": write_rlla_parquet([make_rlla_row(r, i, "train") for i, r in enumerate(train)],
                                    local_dir / "train.parquet"),
        "test": write_rlla_parquet([make_rlla_row(r, i, "test") for i, r in enumerate(test)],
                                   local_dir / "test.parquet"),
    }
    logger.info("%s: %d rows → %d train + %d test in %s", input_path, len(records), len(train), len(test), local_dir)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; prints the written paths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default=str(HERE / "rlla_rl.json"), help="raw JSON list of records")
    parser.add_argument("--local_dir", default=str(HERE.parent / "rlla_4k"), help="output folder")
    parser.add_argument("--seed", type=int, default=TOOLRL_SEED, help="shuffle seed (ToolRL: 31415)")
    parser.add_argument("--test_frac", type=float, default=TOOLRL_TEST_FRAC, help="test fraction (ToolRL: 0.02)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for split, path in preprocess(args.input, args.local_dir, args.seed, args.test_frac).items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
