"""SFT warm-start traces for ``route_qa`` (``docs/route_qa.md`` "The warm start's traces"): the tool episodes a
policy should play, one SFT row per assistant turn, with the tools really executed.

    python -m verl.trainer.route_qa.traces --data_dir DIR [--output DIR/sft_train.parquet] [--split train]
        [--answer_after_call 1] [--direct_answer 1] [--table 0]

Per question, the prompts of three settings, each as the router's rewrite renders it (``router.filter_tools=true``):

- **its own route** (the kind's: CALCULATE, SEARCH, ANSWER): a tool question calls its tool, reads the observation and
  answers; a direct question answers at once;
- **a tool route on a direct question** (CALCULATE for direct arithmetic, SEARCH for a direct fact): it calls the tool
  anyway, as a tool-trained model does when tools are offered, so that on a direct question a tool route costs and
  only ANSWER saves the cost;
- **both tools offered** (the row's own prompt, what "always-tools" plays): it calls the tool that answers it.

A turn with a call is ``<tool_call>`` + the call in ToolRL's format; the observation is the tool's real output
(calculator; BM25 search over the task's corpus, top 1); the answer turn is ``<response> answer</response>``, the
answer after a space so that its tokens are the tokens it has in running text (a byte-level BPE gives ``" Zethvu"``
other ids than ``"Zethvu"``): copying it from the observation or the question is token for token. A turn's
row holds the conversation up to it (``prompt``: system, user, then any assistant and ``tool`` messages) and the
turn's text (``response``), for :class:`~verl.utils.dataset.sft_dataset.SFTDataset` with ``data.response_key=response``.

:class:`TraceMix` weighs the rows (``docs/route_qa.md`` "The warm start's traces"): the answer turns that copy an
observation and the direct questions answered at once are written more than once, and the one-digit table (every
problem a direct arithmetic question can ask, under ANSWER, in the training templates) is added. All three are off
by default: in run rq-04 they took SFT steps from the call turns and did not teach the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from verl.router import RouterAction
from verl.router.families import row_tool_families
from verl.router.rewrite import rewrite_messages
from verl.utils.dataset.route_qa import ROUTE_OF_KIND, SYSTEM_PROMPT, TEMPLATES, TOOL_FAMILIES, one_digit_problems
from verl.utils.reward_score.tool_formats import render_calls

__all__ = ["TOOL_ROUTE", "TraceMix", "route_qa_tool_specs", "sft_rows", "table_rows", "trace_messages", "write_traces"]

logger = logging.getLogger(__name__)

TOOL_ROUTE = {tool: RouterAction[family] for tool, family in TOOL_FAMILIES.items()}  # the route offering each tool


@dataclass(frozen=True)
class TraceMix:
    """How often each SFT row is written: ``answer_after_call`` times an answer turn that follows an observation
    (the copy of the tool's result), ``direct_answer`` times a direct question answered at once under ANSWER, every
    other row once; and ``table`` rows of each one-digit problem (:func:`table_rows`). ``TraceMix(1, 1, 0)`` is the
    plain traces."""

    answer_after_call: int = 1
    direct_answer: int = 1
    table: int = 0

    def __post_init__(self):
        for name in ("answer_after_call", "direct_answer"):
            if getattr(self, name) < 1:
                raise ValueError(f"TraceMix.{name} must be >= 1, got {getattr(self, name)}")
        if self.table < 0:
            raise ValueError(f"TraceMix.table must be >= 0, got {self.table}")


def route_qa_tool_specs(corpus_path: str | Path) -> list[dict]:
    """The ``multi_turn.tools`` of the task: the calculator and BM25 search over ``corpus_path`` (top 1)."""
    return [
        {"ref": "agent_system.tools.builtin:calculator", "kwargs": {}},
        {"ref": "agent_system.tools.builtin:search_tool", "kwargs": {"corpus_path": str(corpus_path), "top_k": 1}},
    ]


def trace_messages(prompt: Sequence[dict], route: RouterAction | None, extra: dict) -> list[dict]:
    """The opening messages under ``route`` (None: the row's own prompt, both tools offered)."""
    messages = [dict(m) for m in prompt]
    if route is None:
        return messages
    families = row_tool_families(messages, extra)
    return rewrite_messages(messages, int(route), families, filter_tools=True)


def _episode(messages: list[dict], answer: str, call: dict | None, observation: str | None) -> list[dict]:
    """One SFT row per assistant turn of an episode."""
    answer_text = f"<response> {answer}</response>"  # after a space: the module docstring
    if call is None:
        return [{"prompt": messages, "response": answer_text}]
    call_text = render_calls([call], "toolrl")
    after = messages + [{"role": "assistant", "content": call_text}, {"role": "tool", "content": observation}]
    return [{"prompt": messages, "response": call_text}, {"prompt": after, "response": answer_text}]


def sft_rows(rows: Sequence[dict], tools, mix: TraceMix = TraceMix()) -> list[dict]:
    """The SFT rows of ``rows`` (``route_qa`` parquet rows as dicts) with their calls executed by ``tools`` (a
    :class:`~agent_system.tools.base.ToolRegistry` holding ``calculator`` and ``search``), each written as often as
    ``mix`` says (the repeats follow each other; the trainer shuffles).

    Returns:
        Rows ``{"prompt", "response", "extra_info": {"index", "kind", "setting", "turn"}}``, ``setting`` one of
        ``own_route``, ``tool_route``, ``both_tools``.

    Raises:
        ValueError: a call fails or its observation does not hold the answer (the task and its tools disagree; the
            row's index is named).
    """
    out = []
    for row in rows:
        extra, answer = dict(row["extra_info"]), str(row["reward_model"]["ground_truth"])
        call = json.loads(extra["call"])
        (result,) = tools.run([call])
        if not result.ok or answer not in result.content:
            raise ValueError(f"route_qa row {extra['index']}: the call {call} gave {result.content!r}, not {answer!r}")
        settings = [("own_route", RouterAction[ROUTE_OF_KIND[extra["kind"]]])]
        if not extra["needs_tool"]:
            settings.append(("tool_route", TOOL_ROUTE[call["name"]]))
        settings.append(("both_tools", None))
        for setting, route in settings:
            messages = trace_messages(row["prompt"], route, extra)
            answer_at_once = route == RouterAction.ANSWER
            turns = _episode(
                messages, answer, None if answer_at_once else call, None if answer_at_once else result.content
            )
            for k, turn in enumerate(turns):
                info = {"index": int(extra["index"]), "kind": extra["kind"], "setting": setting, "turn": k}
                repeats = mix.answer_after_call if k == 1 else mix.direct_answer if answer_at_once else 1
                out += [{**turn, "extra_info": info}] * repeats
    return out


def table_rows(repeats: int, seed: int = 0) -> list[dict]:
    """``repeats`` SFT rows per one-digit problem (:func:`~verl.utils.dataset.route_qa.one_digit_problems`): the
    question in a training template drawn with ``random.Random(seed)``, under the ANSWER route, answered at once.

    Returns:
        Rows as :func:`sft_rows`'s, ``extra_info`` ``{"index": -1, "kind": "direct", "setting": "table", "turn": 0}``.
    """
    rng, out = random.Random(seed), []
    families = {"tool_families": dict(TOOL_FAMILIES)}
    for phrase, answer in one_digit_problems():
        for _ in range(repeats):
            question = rng.choice(TEMPLATES["train"]).format(q=phrase)
            prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
            messages = trace_messages(prompt, RouterAction.ANSWER, families)
            info = {"index": -1, "kind": "direct", "setting": "table", "turn": 0}
            out.append({**_episode(messages, answer, None, None)[0], "extra_info": info})
    return out


def write_traces(
    data_dir: str | Path, output: str | Path | None = None, split: str = "train", mix: TraceMix = TraceMix()
) -> Path:
    """Write the SFT rows of ``<data_dir>/<split>.parquet`` (calls run over ``<data_dir>/corpus.jsonl``), weighed
    and completed by ``mix``, to ``output`` (default ``<data_dir>/sft_<split>.parquet``); returns its path."""
    import pandas as pd

    from agent_system.tools.base import ToolRegistry
    from agent_system.tools.runner import make_tool_runner

    data_dir = Path(data_dir)
    output = Path(output) if output else data_dir / f"sft_{split}.parquet"
    rows = pd.read_parquet(data_dir / f"{split}.parquet").to_dict("records")
    for row in rows:
        row["prompt"] = [dict(m) for m in row["prompt"]]
    runner = make_tool_runner(ToolRegistry.from_specs(route_qa_tool_specs(data_dir / "corpus.jsonl")), sandbox="none")
    try:
        traces = sft_rows(rows, runner, mix) + table_rows(mix.table)
    finally:
        runner.close()
    pd.DataFrame(traces).to_parquet(output, index=False)
    logger.info("route_qa traces: %d SFT rows from %d %s questions -> %s", len(traces), len(rows), split, output)
    return output


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m verl.trainer.route_qa.traces", description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--output", default=None)
    parser.add_argument("--split", default="train")
    parser.add_argument("--answer_after_call", type=int, default=TraceMix.answer_after_call)
    parser.add_argument("--direct_answer", type=int, default=TraceMix.direct_answer)
    parser.add_argument("--table", type=int, default=TraceMix.table)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    mix = TraceMix(args.answer_after_call, args.direct_answer, args.table)
    print(write_traces(args.data_dir, args.output, args.split, mix))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
