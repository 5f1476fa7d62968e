"""Paired validation comparison of training runs from their validation dumps (``trainer.validation_data_dir``).

Each run's folder holds ``<step>.jsonl`` files (one line per response: ``row``, ``score``, ``format``,
``correctness``; verl/async_rl/validation.py and verl/trainer/ppo/rollout_dump.py write them). The base is the
``0.jsonl`` of any run (every run starts from the same weights, and greedy validation gives the same responses). For
each run its last validation is compared with the base and, for each ``--pair A,B``, B's last with A's, on the rows
both scored: the paired statistics of each reward part (``verl.trainer.eval_compare.paired_stats``: gain, its standard
error with rows as units, t, wins / losses / ties, sign-test p).
Rows are matched by their prompt text (``input``: both trainers write the same text for a row), so async and
synchronous runs pair up; validation with one response per prompt.

Usage::

    python experiments/scripts/async_validation_summary.py --result OUT.json \\
        --run age1_none=DIR --run age4_token=DIR ... --pair age1_none,age1_token ...

Adds ``validation_paired`` to the JSON file ``--result`` (created when missing) and prints it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

PARTS = ("score", "format", "correctness")


def per_row(path: Path) -> dict:
    """``{(prompt text, occurrence): record}`` of one validation dump (one response per prompt), unscorable
    responses (``score`` null) left out. Keyed by the prompt so that dumps of both trainers pair up."""
    out, seen = {}, {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        k = seen[record["input"]] = seen.get(record["input"], -1) + 1
        if record.get("score") is not None:
            out[(record["input"], k)] = record
    return out


def paired(base: dict, other: dict) -> dict:
    """``verl.trainer.eval_compare.paired_stats`` of ``other - base`` per reward part over the rows both hold."""
    from verl.trainer.eval_compare import paired_stats

    rows = sorted(set(base) & set(other))
    return {
        "rows": len(rows),
        **{part: paired_stats([base[r][part] for r in rows], [other[r][part] for r in rows]) for part in PARTS},
    }


def summarise(runs: dict[str, Path], pairs: list[tuple[str, str]]) -> dict:
    """The ``validation_paired`` block: ``version0`` means, ``<run>_vs_version0`` and ``<b>_minus_<a>`` comparisons.

    Raises FileNotFoundError: no run has a ``0.jsonl`` or a run has no dump. KeyError: a pair names an unknown run."""
    bases = [folder / "0.jsonl" for folder in runs.values() if (folder / "0.jsonl").is_file()]
    if not bases:
        raise FileNotFoundError("no run folder holds 0.jsonl (validation before training)")
    base = per_row(bases[0])
    final = {}
    for name, folder in runs.items():
        dumps = sorted(folder.glob("*.jsonl"), key=lambda f: int(f.stem))
        if not dumps or dumps[-1].stem == "0":
            raise FileNotFoundError(f"{folder}: no validation after training")
        final[name] = per_row(dumps[-1])
    out: dict = {"version0": {**{p: statistics.fmean(r[p] for r in base.values()) for p in PARTS}, "rows": len(base)}}
    for name, rows in final.items():
        out[f"{name}_final"] = {**{p: statistics.fmean(r[p] for r in rows.values()) for p in PARTS}, "rows": len(rows)}
        out[f"{name}_vs_version0"] = paired(base, rows)
    for a, b in pairs:
        out[f"{b}_minus_{a}"] = paired(final[a], final[b])
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--result", required=True, help="JSON file the block is added to")
    parser.add_argument("--run", action="append", default=[], help="NAME=DIR (a validation_data_dir)")
    parser.add_argument("--pair", action="append", default=[], help="A,B: B's last validation minus A's")
    args = parser.parse_args(argv)
    runs = {}
    for spec in args.run:
        name, _, folder = spec.partition("=")
        runs[name] = Path(folder)
    pairs = [tuple(p.split(",", 1)) for p in args.pair]
    block = summarise(runs, [p for p in pairs if p[0] in runs and p[1] in runs])
    path = Path(args.result)
    result = json.loads(path.read_text()) if path.is_file() else {}
    result["validation_paired"] = block
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(block, indent=2))


if __name__ == "__main__":
    main()
