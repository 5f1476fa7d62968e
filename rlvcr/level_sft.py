"""SFT warm start for the RLVCR level format on RLLA rows (``docs/rlvcr.md``, sections "Level SFT" and "Response
format and parsing"): the RL policy must already write ``<level>N</level><think>…</think>\\n<tool_call>…`` before
RLVCR can parse a single rollout.

One RLLA row (chat prompt, ground truth ``<think>T</think>\\n<action part>``) becomes one SFT row:

- prompt: :func:`rlvcr.prompts.add_level_guide` of the messages with ``RLLA_FORMAT``, the same messages that
  ``rlvcr.rollout_phase.rlla_level_setup``'s chat template renders for the RL rollout;
- target (column ``level_target``): ``<level>L</level><think>T_L</think>\\n<action part>`` with L uniform in
  ``1..4`` (one seeded draw per row) and T_L empty (L = 1), the first sentence of T (L = 2), the first three sentences
  (L = 3) or all of T (L = 4; with ``max_top_sentences`` its first that many sentences: a short-think variant for
  models too small to close a ~400-token think). The ground truth column is left unchanged.

Skipped rows (counted by reason): a ground truth without a think or a complete action span, with text other than
``\\n`` between ``</think>`` and the action, or whose think quotes an action tag (ToolRL's format rule counts those
tags over the whole answer, and the reward cannot parse such a ground truth: 17 of the 399 ``sft_full`` rows).

CLI: ``python -m rlvcr.level_sft --out PATH.parquet [--seed S] [--split sft_full|test] [--max-top-sentences K]``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlvcr.prompts import LEVEL, RLLA_FORMAT, LevelFormat, add_level_guide, level_context, parse_level_response
from verl.utils.reward_score.tool_parse import close_tag, open_tag

__all__ = [
    "LEVEL_SENTENCES",
    "build_level_sft_file",
    "build_level_sft_rows",
    "check_max_top_sentences",
    "draw_level",
    "level_sft_row",
    "level_sft_schema",
    "level_think",
    "main",
    "sentence_ends",
]

# sentences of T kept at each level below the top one (the top level keeps all of T, level 1 none)
LEVEL_SENTENCES: Dict[int, int] = {2: 1, 3: 3}
_SENTENCE_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s|$)")
_NOT_AN_END = {"etc", "vs", "mr", "mrs", "ms", "dr", "approx"}
_INITIALS = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # e.g, i.e, U.S (before their last dot)


def sentence_ends(text: str) -> List[int]:
    """Offsets just after each sentence of ``text``: ``.``/``!``/``?`` (closing quotes or brackets included) followed
    by whitespace or the end. Not an end: after a one-character word (``1.`` in a list), initials (``e.g.``,
    ``U.S.``) or a common abbreviation (``etc.``, ``vs.``); a domain (``site.org.``) does end a sentence."""
    ends = []
    for match in _SENTENCE_END.finditer(text):
        words = text[: match.start()].rsplit(None, 1)
        word = words[-1].lstrip("\"'([") if words else ""
        if len(word) <= 1 or _INITIALS.fullmatch(word) or word.lower() in _NOT_AN_END:
            continue
        ends.append(match.end())
    return ends


def check_max_top_sentences(max_top_sentences: Optional[int]) -> None:
    """Raises ValueError: a level-4 cap (:func:`level_think`) not above the middle levels' sentence counts (None: no
    cap, fine)."""
    if max_top_sentences is not None and int(max_top_sentences) <= max(LEVEL_SENTENCES.values()):
        raise ValueError(
            f"max_top_sentences={max_top_sentences} must exceed the middle levels' sentence counts {LEVEL_SENTENCES}"
        )


def level_think(think: str, level: int, fmt: LevelFormat = RLLA_FORMAT, max_top_sentences: Optional[int] = None) -> str:
    """T_L of a full think T (str): ``""`` at level 1, the first ``LEVEL_SENTENCES[level]`` sentences at the middle
    levels (all of T when it has fewer), T itself at ``fmt.num_levels`` (or its first ``max_top_sentences``
    sentences when given). Cut thinks keep T's leading and trailing whitespace (``<think> … </think>`` in ToolRL's
    data), so the stripped T_2 is a prefix of the stripped T_3.

    Raises ValueError: ``level`` outside ``1..num_levels``, a middle level without a sentence count, or
    ``max_top_sentences`` not above the middle levels' counts.
    """
    if level == 1:
        return ""
    if level == fmt.num_levels:
        if max_top_sentences is None:
            return think
        check_max_top_sentences(max_top_sentences)
        count = int(max_top_sentences)
    elif level not in LEVEL_SENTENCES or not 1 < level < fmt.num_levels:
        raise ValueError(f"no think length for level {level} (levels 1..{fmt.num_levels}, {LEVEL_SENTENCES})")
    else:
        count = LEVEL_SENTENCES[level]
    body = think.strip()
    ends = sentence_ends(body)
    if len(ends) < count or ends[count - 1] >= len(body):
        return think
    lead = think[: len(think) - len(think.lstrip())]
    trail = think[len(think.rstrip()) :]
    return lead + body[: ends[count - 1]] + trail


def draw_level(seed: int, index: int, num_levels: int = 4) -> int:
    """Level of row ``index`` (int): uniform in ``1..num_levels`` from a NumPy generator seeded with
    ``(seed, index)``: a row's level depends only on the seed and its position (``extra_info.index`` in the RLLA
    splits), not on the other rows' content."""
    return int(np.random.default_rng([int(seed), int(index)]).integers(1, num_levels + 1))


def level_sft_row(
    messages: Sequence[Mapping[str, str]],
    ground_truth: str,
    level: int,
    fmt: LevelFormat = RLLA_FORMAT,
    max_top_sentences: Optional[int] = None,
) -> Tuple[Optional[Tuple[List[Dict[str, str]], str]], str]:
    """One RLLA row at ``level``: ``((prompt messages, target), "")`` or ``(None, reason)`` for a skipped row.

    ``messages``: the row's chat prompt (list of ``{role, content}``); ``ground_truth``:
    ``<think>T</think>\\n<action part>``. The ground truth is parsed with :func:`parse_level_response` (behind a top
    level tag) and must be rebuilt exactly by :func:`level_context` + the text from the action content on; the target
    is ``level_context(level, level_think(T, level, fmt, max_top_sentences), action tag) + that text``.

    Raises ValueError: ``level`` outside ``1..num_levels``.
    """
    if not 1 <= level <= fmt.num_levels:
        raise ValueError(f"level must be in 1..{fmt.num_levels}, got {level}")
    top = f"{open_tag(LEVEL)}{fmt.num_levels}{close_tag(LEVEL)}"
    text = top + ground_truth
    parsed = parse_level_response(text, fmt.action_tags, fmt.num_levels)
    if not parsed.parseable:
        return None, f"unparseable ({parsed.reason})"
    if any(open_tag(t) in parsed.think or close_tag(t) in parsed.think for t in fmt.action_tags):
        return None, "think quotes an action tag"
    if text[: parsed.action_start] != level_context(fmt.num_levels, parsed.think, parsed.action_tag, fmt):
        return None, "layout (text around the think block)"
    target = level_context(level, level_think(parsed.think, level, fmt, max_top_sentences), parsed.action_tag, fmt)
    return (add_level_guide(list(messages), fmt), target + text[parsed.action_start :]), ""


def build_level_sft_rows(
    rows: Iterable[Mapping],
    seed: int = 1,
    fmt: LevelFormat = RLLA_FORMAT,
    exclude_prompts: Iterable = (),
    max_top_sentences: Optional[int] = None,
) -> Tuple[List[dict], Counter]:
    """Level SFT rows from RLLA rows (dicts in the RLLA schema): each kept row is the input row with ``prompt``
    replaced by the level prompt, plus ``level_target`` (str) and ``level`` (int, :func:`draw_level` of the row's
    position). ``exclude_prompts``: prompt signatures (``rlla_data.prompt_signature``) to drop, e.g. validation
    prompts. ``max_top_sentences``: see :func:`level_think`. Returns ``(rows, skipped)``, ``skipped`` counting
    reasons. Raises ValueError: ``max_top_sentences`` not above the middle levels' sentence counts."""
    from verl.utils.dataset.rlla_data import prompt_signature

    check_max_top_sentences(max_top_sentences)  # before the first row, whatever levels are drawn
    excluded = set(exclude_prompts)
    out, skipped = [], Counter()
    for index, row in enumerate(rows):
        if excluded and prompt_signature(row["prompt"]) in excluded:
            skipped["validation prompt"] += 1
            continue
        level = draw_level(seed, index, fmt.num_levels)
        made, reason = level_sft_row(row["prompt"], row["reward_model"]["ground_truth"], level, fmt, max_top_sentences)
        if made is None:
            skipped[reason] += 1
            continue
        out.append({**row, "prompt": made[0], "level_target": made[1], "level": level})
    return out, skipped


def level_sft_schema() -> pa.Schema:
    """The level SFT parquet's schema: the RLLA schema plus ``level_target`` (string) and ``level`` (int64)."""
    from verl.utils.dataset.rlla_data import RLLA_ARROW_SCHEMA

    return RLLA_ARROW_SCHEMA.append(pa.field("level_target", pa.string())).append(pa.field("level", pa.int64()))


def build_level_sft_file(
    out: str | os.PathLike, seed: int = 1, split: str = "sft_full", max_top_sentences: Optional[int] = None
) -> Tuple[Path, Counter, Counter]:
    """Write the level SFT parquet of RLLA ``split`` (``sft_full`` or ``test``, found by ``resolve_rlla_file``) to
    ``out`` atomically: the RLLA schema + ``level_target`` + ``level``. ``sft_full`` rows whose prompt is a validation
    prompt are dropped (``rlla_data`` already drops them; checked again); ``max_top_sentences`` as
    :func:`level_think`. Returns ``(path, level counts, skipped)``.

    Raises FileNotFoundError: the split cannot be found or built.
    """
    from verl.utils.dataset.rlla_data import prompt_signature, resolve_rlla_file, write_parquet_atomic

    rows = pq.read_table(resolve_rlla_file(split)).to_pylist()
    exclude = ()
    if split != "test":
        exclude = {prompt_signature(p) for p in pq.read_table(resolve_rlla_file("test")).column("prompt").to_pylist()}
    kept, skipped = build_level_sft_rows(rows, seed, exclude_prompts=exclude, max_top_sentences=max_top_sentences)
    path = write_parquet_atomic(pa.Table.from_pylist(kept, schema=level_sft_schema()), out)
    return path, Counter(r["level"] for r in kept), skipped


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI (see the module docstring): write the parquet, print the level and skip counts."""
    parser = argparse.ArgumentParser(description="Build the RLVCR level-format SFT parquet from RLLA rows.")
    parser.add_argument("--out", required=True, help="output parquet path")
    parser.add_argument("--seed", type=int, default=1, help="level draw seed (default 1)")
    parser.add_argument("--split", default="sft_full", choices=("sft_full", "test"), help="RLLA split to convert")
    parser.add_argument(
        "--max-top-sentences",
        type=int,
        default=None,
        help="cap the top level's think at this many sentences (default: the whole think)",
    )
    args = parser.parse_args(argv)
    path, levels, skipped = build_level_sft_file(args.out, args.seed, args.split, args.max_top_sentences)
    print(f"wrote {sum(levels.values())} rows to {path}")
    print("levels: " + ", ".join(f"{k}={levels.get(k, 0)}" for k in range(1, RLLA_FORMAT.num_levels + 1)))
    print(f"skipped: {sum(skipped.values())}" + "".join(f"\n  {k}: {v}" for k, v in sorted(skipped.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
