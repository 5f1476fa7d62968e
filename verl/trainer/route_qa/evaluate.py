"""Play the ``route_qa`` test questions under every setting once, then score any routing policy from that table
(``docs/route_qa.md`` "Evaluation").

    python -m verl.trainer.route_qa.evaluate --model MODEL_DIR --data_dir DIR --output table.parquet [--split test]

A setting is what an episode is offered: one of the router's routes (``ANSWER``, ``SEARCH``, ``CALCULATE``, as its
rewrite renders the prompt and with its family's tools executable) or ``BOTH`` (the row's own prompt, both tools:
what "always-tools" plays). Each question is played greedily once per setting with the executing loop (HF
``generate``; the calculator and BM25 search really run), and the table keeps per question and setting:
``correct`` (exact match, ``verl.utils.reward_score.route_qa``), ``used_tool`` (the policy opened a tool call, the
router's default cost), ``calls``, ``obs_tokens`` and ``seconds``. Greedy decoding makes an episode a function of
its prompt, so a routing policy's accuracy and cost on the split are read off the table
(:mod:`verl.trainer.route_qa.policies`) without playing again.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from verl.router import RouterAction
from verl.trainer.route_qa.traces import route_qa_tool_specs, trace_messages
from verl.utils.reward_score.route_qa import compute_score

__all__ = ["SETTINGS", "load_rows", "play_table"]

logger = logging.getLogger(__name__)

SETTINGS = ("ANSWER", "SEARCH", "CALCULATE", "BOTH")  # the router's routes, and BOTH: the row's own prompt, all tools
DTYPES = {"correct": bool, "used_tool": bool, "calls": np.int64, "obs_tokens": np.int64, "seconds": np.float64}


def load_rows(path: str | Path) -> list[dict]:
    """The rows of a ``route_qa`` parquet file as dicts (prompt messages as plain dicts)."""
    import pandas as pd

    rows = pd.read_parquet(path).to_dict("records")
    for row in rows:
        row["prompt"] = [dict(m) for m in row["prompt"]]
        row["extra_info"] = dict(row["extra_info"])
    return rows


def _route(setting: str) -> RouterAction | None:
    return None if setting == "BOTH" else RouterAction[setting]


def play_table(
    model_dir: str,
    rows: Sequence[dict],
    corpus_path: str | Path,
    settings: Sequence[str] = SETTINGS,
    batch_size: int = 64,
    response_length: int = 160,
    max_prompt_length: int = 512,
    device: str = "cpu",
    max_assistant_turns: int = 4,
) -> dict[str, dict[str, np.ndarray]]:
    """Play every row under every setting (module docstring).

    Args:
        model_dir: an HF model directory (or a preset name, ``verl.utils.model_presets.prepare_model``).
        rows: ``route_qa`` rows (:func:`load_rows`).
        corpus_path: the task's ``corpus.jsonl`` (the search tool's documents).
        response_length: an episode's budget, policy and observation tokens together.
        max_assistant_turns: the assistant turns an episode may take (a run's
            ``actor_rollout_ref.rollout.multi_turn.max_assistant_turns``).

    Returns:
        ``{setting: {"correct": bool [N], "used_tool": bool [N], "calls": int [N], "obs_tokens": int [N],
        "seconds": float [N]}}``.

    Raises:
        ValueError: an unknown setting.
    """
    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from verl.router.rewrite import tokenize_prompts
    from verl.trainer.config_utils import default_section
    from verl.trainer.ppo.multi_turn import MultiTurnRollout
    from verl.utils.model_presets import prepare_model
    from verl.utils.model_utils import load_causal_lm
    from verl.workers.rollout.hf_rollout import HFRollout

    from verl.router.cost import response_tool_usage
    from verl.router.families import row_tool_families

    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise ValueError(f"route_qa evaluate: unknown settings {unknown}; expected {', '.join(SETTINGS)}")
    model_dir = prepare_model(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model_section = default_section("actor_rollout_ref.model", path=model_dir)
    rollout_section = default_section(
        "actor_rollout_ref.rollout", response_length=response_length, do_sample=False, micro_batch_size=batch_size
    )
    model = load_causal_lm(model_section, trainable=False).to(torch.device(device))
    rollout = HFRollout(model, rollout_section, tokenizer)
    section = default_section("actor_rollout_ref.rollout.multi_turn")
    section = OmegaConf.merge(
        section,
        {
            "enable": True,
            "tools": route_qa_tool_specs(corpus_path),
            "sandbox": "none",
            "max_assistant_turns": max_assistant_turns,
        },
    )
    multi_turn = MultiTurnRollout(section, tokenizer, "toolrl", response_length)
    table: dict[str, dict[str, np.ndarray]] = {}
    try:
        for setting in settings:
            start, cols, route = time.monotonic(), {k: [] for k in DTYPES}, _route(setting)
            for lo in range(0, len(rows), batch_size):
                chunk = rows[lo : lo + batch_size]
                messages = [trace_messages(r["prompt"], route, r["extra_info"]) for r in chunk]
                tokens = tokenize_prompts(tokenizer, messages, max_prompt_length, truncation="error")
                ids, mask = tokens["input_ids"], tokens["attention_mask"].bool()
                episodes = multi_turn.play(
                    [ids[i][mask[i]].tolist() for i in range(len(chunk))],
                    rollout.generate_sequences,
                    do_sample=False,
                    validate=True,
                    raw_prompts=messages,
                    offered=None if route is None else multi_turn.offered_for([route] * len(chunk)),
                    forbid_tool_calls=[route == RouterAction.ANSWER] * len(chunk),
                )
                for row, ep in zip(chunk, episodes):
                    policy_text = "".join(ep.texts)
                    score = compute_score(policy_text, str(row["reward_model"]["ground_truth"]))
                    families = row_tool_families(row["prompt"], row["extra_info"])
                    cols["correct"].append(score["correctness"] == 1.0)
                    cols["used_tool"].append(response_tool_usage(policy_text, families).used_any_tool)
                    cols["calls"].append(len(ep.calls))
                    cols["obs_tokens"].append(sum(c.obs_tokens for c in ep.calls))
                    cols["seconds"].append(sum(c.result.seconds for c in ep.calls))
            table[setting] = {k: np.asarray(v, dtype=DTYPES[k]) for k, v in cols.items()}
            logger.info(
                "route_qa %s: accuracy %.3f, tool use %.3f, %.2f calls per question (%d questions, %.0f s)",
                setting,
                table[setting]["correct"].mean(),
                table[setting]["used_tool"].mean(),
                table[setting]["calls"].mean(),
                len(rows),
                time.monotonic() - start,
            )
    finally:
        multi_turn.close()
    return table


def table_frame(table: dict[str, dict[str, np.ndarray]], rows: Sequence[dict]):
    """The table as a long ``pandas.DataFrame``: one row per question and setting, with the question's index, kind
    and subkind."""
    import pandas as pd

    frames = []
    for setting, cols in table.items():
        frame = pd.DataFrame(cols)
        frame.insert(0, "setting", setting)
        frame.insert(0, "subkind", [r["extra_info"]["subkind"] for r in rows])
        frame.insert(0, "kind", [r["extra_info"]["kind"] for r in rows])
        frame.insert(0, "index", [int(r["extra_info"]["index"]) for r in rows])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (the module docstring); prints accuracy and tool use per setting and subkind."""
    parser = argparse.ArgumentParser(
        prog="python -m verl.trainer.route_qa.evaluate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--output", required=True)
    parser.add_argument("--limit", type=int, default=0, help="the first N questions only (0: all)")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS))
    parser.add_argument("--summary", default=None, help="also write the means per setting and subkind as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    data_dir = Path(args.data_dir)
    rows = load_rows(data_dir / f"{args.split}.parquet")
    rows = rows[: args.limit] if args.limit else rows
    table = play_table(args.model, rows, data_dir / "corpus.jsonl", args.settings, args.batch_size)
    frame = table_frame(table, rows)
    frame.to_parquet(args.output, index=False)
    means = frame.groupby(["setting", "subkind"])[["correct", "used_tool", "calls"]].mean().round(4)
    print(means.to_string())
    if args.summary:
        summary = {
            "command": "python -m verl.trainer.route_qa.evaluate "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "model": args.model,
            "questions": len(rows),
            "means": {f"{s}/{k}": row.to_dict() for (s, k), row in means.iterrows()},
        }
        Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
