"""Paired comparison of two generation files (main_eval --baseline): hand-worked statistics and pairing errors."""

import json
import math

import pytest

from verl.trainer import main_eval
from verl.trainer.eval_compare import paired_stats, sign_test_p

GT = '<think> t </think>\n<tool_call>\n{"name": "f", "parameters": {"x": 1}}\n</tool_call>'
RIGHT = GT
WRONG = '<think> t </think>\n<tool_call>\n{"name": "g", "parameters": {"x": 1}}\n</tool_call>'


def test_paired_stats_hand_worked():
    # d = (1, 1, 0, -1, 1): mean 0.4, var = (0.36*3 + 0.16 + 1.96) / 4 = 0.8, se = sqrt(0.8 / 5) = 0.4, t = 1
    st = paired_stats([0, 0, 1, 1, 0], [1, 1, 1, 0, 1])
    assert st["n"] == 5 and st["before"] == pytest.approx(0.4) and st["after"] == pytest.approx(0.8)
    assert st["gain"] == pytest.approx(0.4) and st["se"] == pytest.approx(0.4) and st["t"] == pytest.approx(1.0)
    assert (st["wins"], st["losses"], st["ties"]) == (3, 1, 1)
    # 3 wins vs 1 loss: 2 * P[X <= 1], X ~ Bin(4, 1/2) = 2 * 5/16
    assert st["sign_test_p"] == pytest.approx(10 / 16)


def test_sign_test_and_degenerate_cases():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(10, 0) == pytest.approx(2 / 2**10)
    assert sign_test_p(5, 5) == 1.0  # capped
    same = paired_stats([0.5, 0.5], [0.5, 0.5])
    assert same["se"] == 0 and same["t"] is None and same["ties"] == 2
    assert paired_stats([1.0], [2.0])["se"] is None
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_stats([1.0], [1.0, 2.0])


def _write(path, responses, prompts=None):
    with open(path, "w") as f:
        f.writelines(
            json.dumps(
                {
                    "row": i,
                    "sample": 0,
                    "data_source": "rlla",
                    "prompt": (prompts or {}).get(i, f"p{i}"),
                    "response": resp,
                    "ground_truth": GT,
                }
            )
            + "\n"
            for i, resp in enumerate(responses)
        )
    return path


def test_cli_baseline_pairs_rows_and_reports_gain(tmp_path):
    before = _write(tmp_path / "a.jsonl", [WRONG, WRONG, RIGHT, WRONG])
    after = _write(tmp_path / "b.jsonl", [RIGHT, RIGHT, RIGHT, WRONG])
    out = tmp_path / "s.json"
    assert main_eval.main(["--generations", str(after), "--baseline", str(before), "--output", str(out)]) == 0
    summary = json.loads(out.read_text())
    em = summary["paired"]["metrics"]["exact_match"]
    assert summary["paired"]["rows"] == 4
    assert (em["before"], em["after"], em["gain"]) == (0.25, 0.75, 0.5)
    assert em["se"] == pytest.approx(math.sqrt((3 * 0.25 + 0.25 * 1) / 3 / 4))  # d = 1, 1, 0, 0
    assert (em["wins"], em["losses"], em["ties"]) == (2, 0, 2)
    corr = summary["paired"]["metrics"]["correctness"]
    assert corr["gain"] > 0 and corr["wins"] == 2 and corr["losses"] == 0
    # the unpaired means of the summary are the 'after' side of the comparison
    assert summary["rlla_reward"]["correctness"] == pytest.approx(corr["after"])


def test_cli_baseline_of_other_prompts_is_a_named_error(tmp_path, capsys):
    before = _write(tmp_path / "a.jsonl", [WRONG, WRONG])
    other = _write(tmp_path / "b.jsonl", [RIGHT, RIGHT], prompts={1: "another prompt"})
    assert (
        main_eval.main(["--generations", str(other), "--baseline", str(before), "--output", str(tmp_path / "s.json")])
        == 2
    )
    err = capsys.readouterr().err
    assert "b.jsonl:2" in err and "prompt of ('rlla', 1, 0) differs" in err
    fewer = _write(tmp_path / "c.jsonl", [RIGHT])
    assert (
        main_eval.main(["--generations", str(fewer), "--baseline", str(before), "--output", str(tmp_path / "s.json")])
        == 2
    )
    assert "1 only in the baseline" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main_eval.main(["--oracle", "--dataset", "rlla", "--baseline", str(before), "--output", "x.json"])


def test_samples_of_a_prompt_are_averaged_before_pairing():
    """With several samples per prompt the unit is the prompt: n counts prompts, d_i is the difference of the two
    per-prompt means (pairing sample k with sample k would count 3 prompts as 6 independent pairs)."""
    from verl.trainer.eval_compare import paired_comparison

    def rows(responses):  # responses[i][k]: prompt i, sample k
        return [
            {"row": i, "sample": k, "data_source": "rlla", "prompt": f"p{i}", "response": r, "ground_truth": GT}
            for i, group in enumerate(responses)
            for k, r in enumerate(group)
        ]

    before = rows([[WRONG, WRONG], [RIGHT, WRONG], [RIGHT, RIGHT]])
    after = rows([[RIGHT, WRONG], [WRONG, RIGHT], [RIGHT, RIGHT]])
    metric = lambda r: {"exact_match": float(r["response"] == r["ground_truth"])}  # noqa: E731
    out = paired_comparison(before, after, metric)
    assert (out["rows"], out["prompts"], out["samples_per_prompt"]) == (6, 3, 2)
    em = out["metrics"]["exact_match"]
    # per-prompt means: before (0, 0.5, 1), after (0.5, 0.5, 1); d = (0.5, 0, 0)
    assert em["n"] == 3 and em["gain"] == pytest.approx(1 / 6)
    assert em["se"] == pytest.approx(math.sqrt(((1 / 3) ** 2 + 2 * (1 / 6) ** 2) / 2 / 3))
    assert (em["wins"], em["losses"], em["ties"]) == (1, 0, 2)
    # prompt 1's samples swapped places: by sample index that is a win and a loss, by prompt a tie


def test_bfcl_rows_paired_per_category_over_prompt_means():
    """bfcl=True: only BFCL rows are paired (an RLLA row beside them is left out), each prompt's samples averaged
    first, overall and per category."""
    from verl.trainer.eval_compare import paired_comparison

    def rows(values):  # values[i]: the verdicts of prompt i's two samples; prompts 0, 1 simple_python, 2 irrelevance
        out = [
            {
                "row": i,
                "sample": k,
                "data_source": "bfcl",
                "bfcl_id": f"id{i}",
                "response": "",
                "bfcl_category": "simple_python" if i < 2 else "irrelevance",
                "v": v,
            }
            for i, pair in enumerate(values)
            for k, v in enumerate(pair)
        ]
        return out + [{"row": 9, "sample": 0, "data_source": "rlla", "response": "", "v": 0.0}]

    before, after = rows([(0, 0), (1, 0), (1, 1)]), rows([(1, 0), (1, 1), (0, 1)])
    out = paired_comparison(before, after, lambda r: {"bfcl_accuracy": float(r["v"])}, bfcl=True)
    assert (out["rows"], out["prompts"], out["samples_per_prompt"]) == (6, 3, 2)
    # per-prompt means: before (0, 0.5, 1), after (0.5, 1, 0.5)
    assert out["metrics"]["bfcl_accuracy"]["gain"] == pytest.approx(1 / 6)  # d = (0.5, 0.5, −0.5)
    simple = out["categories"]["simple_python"]["bfcl_accuracy"]
    assert simple["n"] == 2 and simple["gain"] == pytest.approx(0.5) and simple["wins"] == 2
    assert out["categories"]["irrelevance"]["bfcl_accuracy"]["gain"] == pytest.approx(-0.5)
    # without bfcl only the RLLA row is compared
    assert paired_comparison(before, after, lambda r: {"score": float(r["v"])})["rows"] == 1
