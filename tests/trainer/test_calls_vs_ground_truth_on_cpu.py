"""experiments/scripts/calls_vs_ground_truth.py: samples split by their call count against the ground truth's, and the
prompts whose samples' scores differ (the only ones that give GRPO a non-zero advantage), by hand on three prompts."""

from __future__ import annotations

import importlib.util
import json

from conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location(
    "calls_vs_ground_truth", REPO_ROOT / "experiments" / "scripts" / "calls_vs_ground_truth.py"
)
calls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calls)

NO_CALL = "<think> I should respond. </think>\n<response> None of the tools can. </response>"
CALL = '<think> I should call a tool. </think>\n<tool_call>\n{"name": "f", "parameters": {"x": 1}}\n</tool_call>'
F_CALL = [{"name": "f", "arguments": {"x": 1}}]


def _row(row, sample, response, tool_calls, ground_truth, truth_calls):
    return {
        "data_source": "rlla",
        "index": row,
        "row": row,
        "sample": sample,
        "response": response,
        "tool_calls": tool_calls,
        "ground_truth": ground_truth,
        "ground_truth_tool_calls": truth_calls,
    }


def test_splits_and_prompts_whose_scores_differ_by_hand(tmp_path):
    rows = [
        # prompt 0 wants no call: one sample calls (more, score 0), one does not (same, score 1) -> scores differ
        _row(0, 0, CALL, F_CALL, NO_CALL, []),
        _row(0, 1, NO_CALL, [], NO_CALL, []),
        # prompt 1 wants no call and both samples call (more, more): both score 0
        _row(1, 0, CALL, F_CALL, NO_CALL, []),
        _row(1, 1, CALL, F_CALL, NO_CALL, []),
        # prompt 2 wants the call and its one sample answers without it (fewer)
        _row(2, 0, NO_CALL, [], CALL, F_CALL),
    ]
    path = tmp_path / "gen.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    split = calls.split_by_call_count(str(path))
    assert {k: v["samples"] for k, v in split.items()} == {"fewer": 1, "more": 3, "same": 1}
    assert calls.prompts_whose_scores_differ(str(path)) == {"prompts": 3, "scores_differ": 1}
    out = tmp_path / "out.json"
    assert calls.main([str(path), "--output", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["prompts"] == {str(path): {"prompts": 3, "scores_differ": 1}}
    assert written["splits"][str(path)] == split
    # the same sample rows under another data source are another prompt
    path.write_text(
        "".join(
            json.dumps({**r, "data_source": "other"} if r["row"] == 0 and r["sample"] == 1 else r) + "\n" for r in rows
        )
    )
    assert calls.prompts_whose_scores_differ(str(path)) == {"prompts": 4, "scores_differ": 0}
