"""reward-dry-run on the real RLLA test split and on a hand-made JSONL."""
from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from verl.utils.reward_score.dry_run import DryRunSample, main, score_samples
from verl.utils.reward_score.rlla import RewardSwitches


def run(argv):
    out = io.StringIO()
    rc = main(argv, out=out)
    return rc, out.getvalue()


def test_parquet_ground_truths_score_perfectly(shared_dir, monkeypatch):
    for var in ("WITHLENGTH", "SCHEDULEREWARD", "CORRECTMAX1", "MAX1STEP30MAX3", "COARSEREWARD", "REFINEDREWARD",
                "INTERMEDIATEREWARD", "SCHEDULELENGTH"):
        monkeypatch.delenv(var, raising=False)
    path = shared_dir / "data" / "rlla_4k" / "test.parquet"
    frame = pd.read_parquet(path)
    n_tool = int(frame["reward_model"].map(lambda r: "<tool_call>" in r["ground_truth"]).sum())
    rc, text = run(["--parquet", str(path), "--json"])
    assert rc == 0
    payload = json.loads(text)
    stats = payload["stats"]
    assert payload["valid"] == len(frame) == 80 and payload["invalid"] == 0
    assert stats["format"]["min"] == stats["format"]["max"] == 1.0
    # a self-scored GT gets 3 when it has a tool call, 0 otherwise
    assert stats["correctness"]["mean"] == pytest.approx(3.0 * n_tool / len(frame))
    assert stats["score"]["max"] == 4.0 and stats["score"]["min"] == 1.0
    rc, text = run(["--parquet", str(path), "--limit", "5", "--set", "SCHEDULEREWARD=1", "--step", "75"])
    assert rc == 0 and "SCHEDULEREWARD" in text and "samples: 5" in text
    assert "format" in text and " 1.5000" in text  # scheduled format max at step 75


def test_jsonl_with_invalid_rows(tmp_path):
    gt = "<think>t</think>\n<tool_call>\n{\"name\": \"f\", \"parameters\": {\"a\": 1}}\n</tool_call>"
    lines = [
        {"response": gt, "ground_truth": gt},
        {"response": gt.replace("\"a\": 1", "\"a\": 2"), "ground_truth": gt, "step": 0},
        {"response": gt, "ground_truth": "<think>x</think>\n<tool_call>\n{bad}\n</tool_call>"},
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    rc, text = run(["--jsonl", str(path), "--json"])
    payload = json.loads(text)
    assert rc == 0 and payload["valid"] == 2 and payload["invalid"] == 1
    assert payload["invalid_reasons"][0]["row"] == 2
    assert "InvalidGroundTruthError" in payload["invalid_reasons"][0]["reason"]
    # wrong value: M = 3, S = 1 + 1 + 0 → 6·2/3 − 3 = 1
    assert payload["stats"]["correctness"]["min"] == pytest.approx(1.0)
    assert payload["stats"]["score"]["mean"] == pytest.approx((4.0 + 2.0) / 2)


def test_bad_inputs_fail_cleanly(tmp_path, capsys):
    assert main(["--jsonl", str(tmp_path / "missing.jsonl")]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"response": "x"}\n')
    assert main(["--jsonl", str(bad)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    assert main(["--jsonl", str(bad), "--set", "NOPE=1"]) == 2


def test_score_samples_per_sample_step():
    gt = "<think>t</think>\n<response>r</response>"
    report = score_samples([DryRunSample(0, gt, gt, step=0), DryRunSample(1, gt, gt, step=150)],
                           step=999, switches=RewardSwitches(schedulereward=True))
    assert [r["format"] for r in report.results] == [2.0, 1.0]
