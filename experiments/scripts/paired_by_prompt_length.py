"""Paired before/after comparison of two RLLA generation files, overall and split by prompt length.

    python experiments/scripts/paired_by_prompt_length.py BEFORE.jsonl AFTER.jsonl --tokenizer MODEL_DIR \
        --max-prompt-tokens 768 --output experiments/runs/ID/X.json

Rows are matched by (data_source, row, sample) with ``verl.trainer.eval_compare.paired_comparison`` (per-prompt gain,
its standard error, sign test; with several samples per prompt, each side's per-prompt mean) on the RLLA reward's
score / format / correctness and the exact tool-call match. The split uses the chat-templated prompt length of the
RLLA test split (``dataset/rlla_4k/test.parquet`` or DATA_DIR): the rows a run trained on prompts of at most
``--max-prompt-tokens`` tokens can be told apart from longer ones. A
second split is by the starting (BEFORE) response's format score: full (1) or not (a response cut off at the length
limit, or malformed). With several sampled responses per prompt that split selects BEFORE's samples by their own
format and keeps the AFTER samples of the same indices, which are independent draws: its gain compares the trained
policy's average response with the starting policy's well-formed (or malformed) ones only. The RLLA reward reads
ToolRL's switches from the environment as training does (``REFINEDREWARD=1 python ...`` scores by the refined
reward); the output names those that were on (``reward_switches_on``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pandas as pd
from transformers import AutoTokenizer

from verl.trainer.eval_compare import paired_comparison
from verl.trainer.main_eval import read_generations, row_metrics
from verl.utils.dataset.rlla_data import resolve_rlla_file
from verl.utils.reward_score.rlla import RewardSwitches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--tokenizer", required=True, help="model directory whose chat template sizes the prompts")
    parser.add_argument("--max-prompt-tokens", type=int, default=768)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    frame = pd.read_parquet(os.environ.get("RLLA_TEST_FILE") or resolve_rlla_file("test"))
    lengths = [
        len(
            tok(tok.apply_chat_template(list(p), add_generation_prompt=True, tokenize=False), add_special_tokens=False)[
                "input_ids"
            ]
        )
        for p in frame["prompt"]
    ]
    before, after = read_generations(args.before), read_generations(args.after)
    switches = RewardSwitches.from_env()
    metric = lambda row: row_metrics(row, switches)  # noqa: E731
    cut = args.max_prompt_tokens
    out = {
        "before": args.before,
        "after": args.after,
        "max_prompt_tokens": cut,
        "reward_switches_on": switches.active(),
    }  # ToolRL's switches the scores were computed under
    # the split by the starting response's format tells a gain from finishing inside the length limit (a response
    # cut off scores format < 1) from one in the calls themselves
    well_formed = {(r.get("data_source"), r["row"], r.get("sample", 0)) for r in before if metric(r)["format"] >= 1}
    formed = lambda r: (r.get("data_source"), r["row"], r.get("sample", 0)) in well_formed  # noqa: E731
    for name, keep in (
        ("all", lambda r: True),
        (f"prompt<={cut}", lambda r: lengths[r["row"]] <= cut),
        (f"prompt>{cut}", lambda r: lengths[r["row"]] > cut),
        ("before_format=1", formed),
        ("before_format<1", lambda r: not formed(r)),
    ):
        kept_before, kept_after = [r for r in before if keep(r)], [r for r in after if keep(r)]
        if not kept_before and not kept_after:  # e.g. files generated with the same prompt limit: nothing longer
            out[name] = {"rows": 0, "note": "no generation in this split"}
            continue
        out[name] = paired_comparison(kept_before, kept_after, metric)
    text = json.dumps(out, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
