"""rq-04's turn probe: a route_qa warm start asked for each turn of the ideal episode, given the ideal turns before it.

    python experiments/scripts/route_qa_turn_probe.py MODEL_DIR DATA_DIR [--split val] [--questions 120]

For the first ``--questions`` questions of the split, every SFT row of ``verl.trainer.route_qa.traces`` (own route and
tool route; not both tools) is given to the model as its prompt (the conversation up to the turn, the call and the
observation of the ideal episode included) and decoded greedily (48 tokens); a call turn is right when its text
equals the trace's, an answer turn when its final answer does as the reward compares them (so a model trained
without the answer's leading space is probed fairly; rq-04's A and B were probed by an earlier version that
compared the whole text, which A's answers, written without the space then, matched as its traces did). Prints up to three wrong turns per group and one JSON line: ``{group: [right, asked]}`` by subkind,
setting and turn (0: the call or a direct answer, 1: the answer after the observation).
"""

from __future__ import annotations

import argparse
import collections
import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agent_system.tools.base import ToolRegistry
from agent_system.tools.runner import make_tool_runner
from verl.trainer.route_qa.evaluate import load_rows
from verl.trainer.route_qa.traces import route_qa_tool_specs, sft_rows
from verl.utils.reward_score.route_qa import final_answer, normalize


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("data_dir")
    parser.add_argument("--split", default="val")
    parser.add_argument("--questions", type=int, default=120)
    args = parser.parse_args()
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    rows = load_rows(f"{args.data_dir}/{args.split}.parquet")[: args.questions]
    runner = make_tool_runner(ToolRegistry.from_specs(route_qa_tool_specs(f"{args.data_dir}/corpus.jsonl")), "none")
    try:
        traces = sft_rows(rows, runner)
    finally:
        runner.close()
    subkind = {int(r["extra_info"]["index"]): r["extra_info"]["subkind"] for r in rows}
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    shown: collections.Counter = collections.Counter()
    for t in traces:
        e = t["extra_info"]
        if e["setting"] == "both_tools":
            continue
        key = f"{subkind[int(e['index'])]}/{e['setting']}/{e['turn']}"
        text = tok.apply_chat_template([dict(m) for m in t["prompt"]], tokenize=False, add_generation_prompt=True)
        ids = tok(text, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=48, do_sample=False)
        got = tok.decode(out[0, ids.shape[1] :]).split("<|im_end|>")[0]
        want = t["response"]
        if want.startswith("<response>"):  # an answer: as the reward compares it (a leading space or not)
            right = final_answer(got) is not None and normalize(final_answer(got)) == normalize(final_answer(want))
        else:
            right = got.strip() == want.strip()
        counts[key][0] += right
        counts[key][1] += 1
        if not right and shown[key] < 3:
            shown[key] += 1
            print(f"{key} | {t['prompt'][1]['content'][:80]} | want {t['response']!r} | got {got[:70]!r}")
    print(json.dumps(dict(sorted(counts.items()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
