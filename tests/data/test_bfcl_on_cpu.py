"""BFCL and API-Bank evaluation: the RLLA prompt format, the conversion both ways, BFCL's own checker through our
parser, the oracles (100% by construction), BFCL's aggregate figures and the tool-cost metrics."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO_ROOT
from verl.trainer.config_utils import ConfigError
from verl.trainer.eval_bfcl import check_bfcl_response, summarize_bfcl
from verl.trainer.main_eval import main as eval_main
from verl.trainer.tool_cost import expected_tool_cost_metrics, tool_cost_metrics
from verl.utils.dataset import bfcl
from verl.utils.dataset.api_bank import load_api_bank
from verl.utils.dataset.rlla_data import load_raw_records
from verl.utils.dataset.rlla_prompt import render_history, render_system
from verl.router.families import parse_tools_block


# ---------------------------------------------------------------------------------------------------------------------
# The RLLA prompt format
# ---------------------------------------------------------------------------------------------------------------------
def _rerender(text: str) -> str:
    block = parse_tools_block(text)
    return render_system([(t.name, t.description, t.parameters) for t in block.tools])


def test_rlla_system_prompt_rerenders_every_shared_row(shared_dir):
    tests = [p[0]["content"] for p in pd.read_parquet(shared_dir / "data/rlla_4k/test.parquet")["prompt"]]
    assert len(tests) == 80 and all(_rerender(text) == text for text in tests)  # byte for byte
    # the SFT rows too, up to trailing spaces of a line (the tools-block parser strips them)
    sft = [r["instruction"] for r in load_raw_records(shared_dir / "data/rlla_4k_raw/rlla_sft.json")]
    lines = lambda text: [line.rstrip() for line in text.splitlines()]  # noqa: E731
    assert len(sft) == 400 and all(lines(_rerender(text)) == lines(text) for text in sft)


def test_render_history_and_system_extra():
    text = render_history(
        [
            {"role": "user", "content": " hi "},
            {"role": "assistant", "content": "yes"},
            {"role": "tool", "content": "42"},
        ]
    )
    assert text == "**Dialogue Records History**\n<user> hi </user>\n\n<response> yes </response>\n\n<obs> 42 </obs>"
    with pytest.raises(ValueError, match="message 0: role 'system'"):
        render_history([{"role": "system", "content": "x"}])
    system = render_system([("f", "does f", {"a": {"type": "integer"}})], extra="Be brief.")
    assert '\n1. Name: f\nDescription: does f\nParameters: {"a": {"type": "integer"}}\n\n**Steps' in system
    assert system.endswith("(if exists).\n\nBe brief.")


# ---------------------------------------------------------------------------------------------------------------------
# Conversion both ways (hand-made entries: no package needed)
# ---------------------------------------------------------------------------------------------------------------------
ENTRY = {
    "id": "simple_python_x",
    "category": "simple_python",
    "question": [[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Area of 3x4?"}]],
    "prompt_function": [
        {
            "name": "geo.area",
            "description": "Area. Note that the provided function is in Python 3 syntax.",
            "parameters": {
                "type": "dict",
                "required": ["w", "h"],
                "properties": {
                    "w": {"type": "integer", "description": "width"},
                    "h": {"type": "integer", "description": "height"},
                    "unit": {"type": "string", "description": "unit", "default": "cm"},
                    "opts": {"type": "dict", "description": "options"},
                },
            },
        }
    ],
    "ground_truth": [
        {"geo.area": {"w": [3], "h": [4, 4.0], "unit": ["", "cm"], "opts": [{"round": [True], "mode": ["", "fast"]}]}}
    ],
}
ENTRY["function"] = ENTRY["prompt_function"]


def test_bfcl_messages_render_the_rlla_format():
    system, user = bfcl.bfcl_messages(ENTRY)
    assert system["content"].startswith("You are a helpful multi-turn dialogue assistant")
    assert "1. Name: geo.area\nDescription: Area. Note that" in system["content"]
    params = json.loads(system["content"].split("Parameters: ", 1)[1].split("\n", 1)[0])
    assert params == ENTRY["prompt_function"][0]["parameters"]["properties"]
    assert system["content"].endswith("\n\nYou are terse.")  # BFCL's own system message, appended
    assert user["content"] == "**Dialogue Records History**\n<user> Area of 3x4? </user>"
    with pytest.raises(ValueError, match="simple_python_x: 2 turns"):
        bfcl.bfcl_messages({**ENTRY, "question": [[{"role": "user", "content": "a"}]] * 2})


def test_oracle_calls_take_first_acceptable_values_and_omit_optional_ones():
    assert bfcl.oracle_calls(ENTRY["ground_truth"], ENTRY["function"]) == [
        {"name": "geo.area", "parameters": {"w": 3, "h": 4, "opts": {"round": True, "mode": "fast"}}}
    ]
    # "" acceptable but the document says required: the value is given
    required = [
        {**ENTRY["function"][0], "parameters": {**ENTRY["function"][0]["parameters"], "required": ["w", "h", "unit"]}}
    ]
    assert bfcl.oracle_calls(ENTRY["ground_truth"], required)[0]["parameters"]["unit"] == "cm"
    # lists of dicts are possibilities too
    gt = [{"q": {"conds": [[{"f": ["age"], "op": ["", ">"]}]]}}]
    assert bfcl.oracle_calls(gt) == [{"name": "q", "parameters": {"conds": [{"f": "age", "op": ">"}]}}]
    response = bfcl.oracle_response(ENTRY)
    assert response.endswith(
        '<tool_call>\n{"name": "geo.area", "parameters": {"w": 3, "h": 4, "opts": '
        '{"round": true, "mode": "fast"}}}\n</tool_call>'
    )
    assert bfcl.oracle_response({**ENTRY, "ground_truth": None}) == bfcl.NO_CALL_RESPONSE
    assert bfcl.calls_to_bfcl([{"name": "a.b", "parameters": {"x": 1}}, {"name": "c"}]) == [
        {"a.b": {"x": 1}},
        {"c": {}},
    ]


def test_unsatisfiable_answers_are_recognised():
    assert bfcl.unsatisfiable_reason(ENTRY) is None
    doc = ENTRY["function"]
    assert "no acceptable value" in bfcl.unsatisfiable_reason(
        {"function": doc, "ground_truth": [{"geo.area": {"w": []}}]}
    )
    assert "only acceptable value is omission" in bfcl.unsatisfiable_reason(
        {"function": doc, "ground_truth": [{"geo.area": {"w": [""]}}]}
    )
    assert "not a parameter of geo.area" in bfcl.unsatisfiable_reason(
        {"function": doc, "ground_truth": [{"geo.area": {"depth": [2]}}]}
    )
    assert bfcl.unsatisfiable_reason({"function": doc, "ground_truth": [{"geo.area": {"depth": ["", 2]}}]}) is None


def test_parse_categories():
    assert bfcl.parse_categories("simple_python, live_simple") == ["simple_python", "live_simple"]
    assert bfcl.parse_categories(None) == list(bfcl.CATEGORIES)
    with pytest.raises(ValueError, match="unknown BFCL categories \\['simple_java'\\]"):
        bfcl.parse_categories(["simple_java"])


# ---------------------------------------------------------------------------------------------------------------------
# BFCL's own checker (installs bfcl-eval --no-deps into the model cache on first use)
# ---------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bfcl_entries():
    return {c: bfcl.load_category(c, max_rows=4) for c in bfcl.CATEGORIES}


def test_bfcl_checker_verdicts(bfcl_entries):
    entry = bfcl_entries["simple_python"][0]
    assert check_bfcl_response(entry, bfcl.oracle_response(entry))["valid"]
    calls = bfcl.oracle_calls(entry["ground_truth"], entry["function"])
    first = next(iter(calls[0]["parameters"]))
    wrong = [{"name": calls[0]["name"], "parameters": {**calls[0]["parameters"], first: "surely wrong"}}]
    response = "<think> x </think>\n<tool_call>\n" + json.dumps(wrong[0]) + "\n</tool_call>"
    verdict = check_bfcl_response(entry, response)
    assert not verdict["valid"] and verdict["error_type"].startswith(("value_error", "type_error"))
    assert check_bfcl_response(entry, bfcl.NO_CALL_RESPONSE)["error_type"] == "ast_decoder:no_tool_call"
    assert (
        check_bfcl_response(entry, "<tool_call>\n{broken\n</tool_call>")["error_type"] == "ast_decoder:decoder_failed"
    )
    irrelevant = bfcl_entries["irrelevance"][0]
    assert check_bfcl_response(irrelevant, bfcl.NO_CALL_RESPONSE)["valid"]
    assert not check_bfcl_response(irrelevant, response)["valid"]  # any call is wrong there
    relevant = bfcl_entries["live_relevance"][0]
    assert check_bfcl_response(relevant, response)["valid"] and not check_bfcl_response(relevant, "hi")["valid"]


def test_bfcl_prompt_rows_carry_ids(bfcl_entries):
    rows = bfcl.bfcl_rlla_rows("live_simple,irrelevance", max_rows=2)
    assert [r["extra_info"]["bfcl_category"] for r in rows] == ["live_simple"] * 2 + ["irrelevance"] * 2
    assert rows[0]["extra_info"]["bfcl_id"] == bfcl_entries["live_simple"][0]["id"]
    assert rows[0]["data_source"] == "bfcl" and rows[0]["prompt"][1]["content"].startswith("**Dialogue Records")
    assert rows[0]["extra_info"]["bfcl_has_answer"] is True
    assert bfcl.bfcl_rlla_rows("live_relevance", max_rows=1)[0]["extra_info"]["bfcl_has_answer"] is False


def test_bfcl_skip_rows_gives_the_disjoint_next_rows(bfcl_entries):
    """skip_rows=2, max_rows=2 are rows 3-4 of BFCL's file order: the held-out sample after max_rows=2's."""
    for category in ("simple_python", "live_irrelevance"):
        later = bfcl.load_category(category, max_rows=2, skip_rows=2)
        assert [e["id"] for e in later] == [e["id"] for e in bfcl_entries[category][2:4]]
    rows = bfcl.bfcl_rlla_rows("irrelevance", max_rows=1, skip_rows=3)
    assert [r["extra_info"]["bfcl_id"] for r in rows] == [bfcl_entries["irrelevance"][3]["id"]]
    everything = bfcl.load_category("live_parallel")
    assert [e["id"] for e in bfcl.load_category("live_parallel", skip_rows=5)] == [e["id"] for e in everything[5:]]
    with pytest.raises(ValueError, match="skip_rows must be >= 0"):
        bfcl.load_category("simple_python", max_rows=1, skip_rows=-1)


def test_bfcl_oracle_cli_scores_100_percent(tmp_path):
    out = tmp_path / "s.json"
    assert eval_main(["--dataset", "bfcl", "--oracle", "--max-rows", "6", "--output", str(out)]) == 0
    summary = json.loads(out.read_text())
    expected = [c for c in bfcl.CATEGORIES if c not in bfcl.RELEVANCE_CATEGORIES]
    assert sorted(summary["categories"]) == sorted(expected)
    for name, record in summary["categories"].items():
        assert record["accuracy"] == 1.0 and record["rows"] == 6, name
    assert summary["bfcl"]["live_ast"] == 1.0 and summary["bfcl"]["non_live_ast_python"] == 1.0
    assert summary["bfcl"]["non_live_ast"] is None  # BFCL's figure averages Java/JS in, which are not asked
    assert summary["tool_cost"]["decision_f1"] == 1.0 and summary["oracle"] is True
    with pytest.raises(ValueError, match="ships no answers"):
        eval_main(["--dataset", "bfcl", "--oracle", "--categories", "live_relevance", "--output", str(out)])


def test_auto_dataset_routes_bfcl_rows_to_bfcl_checker(tmp_path):
    from verl.trainer.eval_bfcl import oracle_bfcl_rows
    from verl.trainer.main_eval import evaluate_rows

    rows, excluded = oracle_bfcl_rows("simple_python", max_rows=2)
    assert excluded == {} and evaluate_rows(rows, "auto")["categories"]["simple_python"]["accuracy"] == 1.0
    mixed = rows + [{"response": "x", "ground_truth": "<response> y </response>", "data_source": "rlla"}]
    with pytest.raises(ValueError, match="1 of 2 rows|2 of 3 rows are BFCL rows"):
        evaluate_rows(mixed, "auto")


def test_baseline_pairs_two_bfcl_files_on_bfcls_verdicts(tmp_path, capsys):
    """`main_eval --generations after --baseline before` on two BFCL files: paired on BFCL's checker's verdict, overall
    and per category, by hand. Before: the oracle on simple_python row 0 only, no call anywhere else; after: the oracle
    on both simple_python rows, and a call on irrelevance row 0 (wrong there)."""
    from verl.trainer.eval_bfcl import oracle_bfcl_rows

    oracle, _ = oracle_bfcl_rows("simple_python,irrelevance", max_rows=2)
    call = "<tool_call>\n" + json.dumps({"name": "f", "parameters": {}}) + "\n</tool_call>"

    def write(name, responses):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {
                        **row,
                        "row": i,
                        "sample": 0,
                        "data_source": "bfcl",
                        "prompt": f"p{i}",
                        "response": text,
                        "ground_truth": "<response> x </response>",
                    }
                )
                + "\n"
                for i, (row, text) in enumerate(zip(oracle, responses))
            )
        )
        return str(path)

    simple = [r["response"] for r in oracle[:2]]
    before = write("before", [simple[0], bfcl.NO_CALL_RESPONSE, bfcl.NO_CALL_RESPONSE, bfcl.NO_CALL_RESPONSE])
    after = write("after", [simple[0], simple[1], call, bfcl.NO_CALL_RESPONSE])
    out = tmp_path / "s.json"
    assert eval_main(["--generations", after, "--baseline", before, "--output", str(out)]) == 0
    paired = json.loads(out.read_text())["paired"]
    acc = paired["metrics"]["bfcl_accuracy"]
    # before 1, 0, 1, 1 (3/4); after 1, 1, 0, 1 (3/4): one win, one loss
    assert (acc["n"], acc["before"], acc["after"], acc["gain"]) == (4, 0.75, 0.75, 0.0)
    assert (acc["wins"], acc["losses"], acc["ties"]) == (1, 1, 2)
    by_category = paired["categories"]
    assert by_category["simple_python"]["bfcl_accuracy"]["gain"] == 0.5
    assert by_category["irrelevance"]["bfcl_accuracy"]["gain"] == -0.5
    assert list(paired["metrics"]) == ["bfcl_accuracy"]  # no RLLA metric on BFCL rows
    # a BFCL file against an RLLA one: nothing to pair, a named error
    rlla = tmp_path / "rlla.jsonl"
    rlla.write_text(
        json.dumps(
            {
                "row": 0,
                "sample": 0,
                "data_source": "rlla",
                "prompt": "p",
                "response": "x",
                "ground_truth": "<response> y </response>",
            }
        )
        + "\n"
    )
    assert eval_main(["--generations", after, "--baseline", str(rlla)]) == 2
    assert "hold different rows" in capsys.readouterr().err
    # the same positions holding other BFCL entries: refused, naming both ids
    swapped = tmp_path / "swapped.jsonl"
    lines = (tmp_path / "after.jsonl").read_text().splitlines()
    moved = [json.loads(line) for line in lines]
    moved[0]["bfcl_id"], moved[1]["bfcl_id"] = moved[1]["bfcl_id"], moved[0]["bfcl_id"]
    swapped.write_text("".join(json.dumps(r) + "\n" for r in moved))
    assert eval_main(["--generations", str(swapped), "--baseline", before]) == 2
    assert "not of the same BFCL rows" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--generations", "g.jsonl", "--categories", "simple_python"], "--categories: only with --oracle"),
        (["--generations", "g.jsonl", "--max-rows", "3"], "--max-rows: only with --oracle"),
        (["--oracle", "--output", "s.json"], "--oracle needs --dataset"),
        (["--oracle", "--dataset", "api_bank", "--categories", "x", "--output", "s.json"], "only with --dataset bfcl"),
        (["--oracle", "--dataset", "bfcl", "--data-path", "f.json", "--output", "s.json"], "bfcl-eval package"),
    ],
)
def test_eval_cli_refuses_options_it_would_ignore(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        eval_main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_bfcl_summary_uses_bfcl_weighting():
    rows = [
        {"bfcl_category": c}
        for c in ["live_simple"] * 3
        + ["live_multiple", "live_parallel", "live_parallel_multiple"]
        + ["simple_python"] * 2
        + ["multiple", "parallel", "parallel_multiple", "irrelevance"]
    ]
    valid = [True, True, False, False, True, True, True, False, True, True, False, True]
    results = [
        {
            "valid": v,
            "error_type": None if v else "x",
            "num_calls": 1 if c["bfcl_category"] != "irrelevance" else 0,
            "made_call": c["bfcl_category"] != "irrelevance",
        }
        for c, v in zip(rows, valid)
    ]
    summary = summarize_bfcl(rows, results)
    assert summary["bfcl"]["live_ast"] == pytest.approx(4 / 6)  # row-weighted: (2 + 0 + 1 + 1) / (3 + 1 + 1 + 1)
    assert summary["bfcl"]["non_live_ast_python"] == pytest.approx((0.5 + 1 + 1 + 0) / 4)  # unweighted
    assert summary["bfcl"]["irrelevance"] == 1.0 and summary["bfcl"]["live_relevance"] is None
    assert summary["bfcl"]["non_live_ast"] is None  # a category of the figure (Java/JS) was not evaluated: N/A
    partial = summarize_bfcl(rows[:3], results[:3])["bfcl"]
    assert partial["live_ast"] is None and partial["non_live_ast_python"] is None
    assert summary["categories"]["live_simple"] == {"accuracy": 2 / 3, "rows": 3, "correct": 2, "error_types": {"x": 1}}


def test_generation_refuses_a_path_with_bfcl(tmp_path):
    from verl.trainer.main_generation import load_generation_config, resolve_parquet

    cfg = load_generation_config(["data.format=bfcl", "data.path=x.parquet"])
    with pytest.raises(ConfigError, match="data.categories"):
        resolve_parquet(cfg.data, str(tmp_path))
    cfg = load_generation_config(["data.format=bfcl", "data.categories=[nope]"])
    with pytest.raises(ConfigError, match="unknown BFCL categories"):
        resolve_parquet(cfg.data, str(tmp_path))
    cfg = load_generation_config(["data.format=bfcl", "data.filter_overlong_prompts=true"])
    with pytest.raises(ConfigError, match="would drop rows that BFCL counts"):
        resolve_parquet(cfg.data, str(tmp_path))


# ---------------------------------------------------------------------------------------------------------------------
# API-Bank levels and the tool-cost metrics
# ---------------------------------------------------------------------------------------------------------------------
def _api_bank_file(path, answer, user="**Dialogue Records History**\n<user> x </user>"):
    path.write_text(json.dumps([{"system": "tools...", "user": user, "answer": answer, "other": {"sample_id": 0}}]))
    return path


def test_api_bank_accepts_every_level_form(tmp_path, shared_dir):
    call = {"name": "SymptomSearch", "parameters": {"symptom": "rash"}}
    assert load_api_bank(_api_bank_file(tmp_path / "l2.json", call))[0]["answer"] == [call]  # level 2: one object
    assert load_api_bank(_api_bank_file(tmp_path / "l3.json", [call]))[0]["answer"] == [call]
    with pytest.raises(ValueError, match=r"l4.json:0: answer\[0\]: parameters: expected an object"):
        load_api_bank(_api_bank_file(tmp_path / "l4.json", [{"name": "x", "parameters": "a=1"}]))
    with pytest.raises(ValueError, match="l5.json:0: answer: expected a non-empty list of tool calls or one call"):
        load_api_bank(_api_bank_file(tmp_path / "l5.json", []))
    for path in (tmp_path / "l2.json", shared_dir / "data/api_bank/level-1-api_processed.json"):
        out = tmp_path / "s.json"
        assert eval_main(["--dataset", "api_bank", "--data-path", str(path), "--oracle", "--output", str(out)]) == 0
        summary = json.loads(out.read_text())
        assert summary["exact_match"] == 1.0 and summary["tool_cost"]["decision_f1"] == 1.0


def test_tool_cost_metrics_hand_worked():
    # rows: call wanted & made & right (2 calls); wanted & not made; not wanted & made (wrong); not wanted & not made
    m = tool_cost_metrics([2, 0, 1, 0], [True, True, False, False], [True, False, False, True])
    assert m["calls_per_prompt"] == 0.75 and m["tool_use_rate"] == 0.5 and m["decision_accuracy"] == 0.5
    assert m["decision_precision"] == 0.5 and m["decision_recall"] == 0.5 and m["decision_f1"] == 0.5
    assert m["tool_productivity"] == pytest.approx(2 / 3)  # 2 correct answers for 3 calls
    assert tool_cost_metrics([0], [False], [True])["tool_productivity"] is None
    with pytest.raises(ValueError, match="lengths differ"):
        tool_cost_metrics([1], [True, False], [True])


def test_expected_tool_cost_metrics_are_ratios_of_expected_counts():
    # the rows above, each response now made with probability 1/2 (else no call, wrong): TP 0.5 (row 0), FN 1.5,
    # FP 0.5 (row 2), TN 1.5; expected calls 1 + 0 + 0.5 + 0; P(correct) 0.5, 0, 0, 1 (row 3 is right without a call)
    m = expected_tool_cost_metrics(
        [1.0, 0.0, 0.5, 0.0], [True, True, False, False], [0.5, 0.0, 0.0, 1.0], [0.5, 0.0, 0.5, 0.0]
    )
    assert m["calls_per_prompt"] == pytest.approx(0.375) and m["tool_use_rate"] == pytest.approx(0.25)
    assert m["decision_accuracy"] == pytest.approx(0.5) and m["decision_precision"] == pytest.approx(0.5)
    assert m["decision_recall"] == pytest.approx(0.25) and m["decision_f1"] == pytest.approx(1 / 3)
    assert m["tool_productivity"] == pytest.approx(1.5 / 1.5)
    # 0/1 inputs: exactly tool_cost_metrics
    assert expected_tool_cost_metrics(
        [2.0, 0.0, 1.0, 0.0], [True, True, False, False], [1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]
    ) == tool_cost_metrics([2, 0, 1, 0], [True, True, False, False], [True, False, False, True])
    with pytest.raises(ValueError, match=r"made_call\[1\] = 1.5: expected a probability in \[0, 1\]"):
        expected_tool_cost_metrics([0.0, 0.0], [True, False], [0.0, 0.0], [0.0, 1.5])


def test_eval_cli_as_a_reviewer_runs_it(tmp_path):
    out = tmp_path / "s.json"
    cmd = [
        sys.executable,
        "-m",
        "verl.trainer.main_eval",
        "--dataset",
        "bfcl",
        "--categories",
        "simple_python,irrelevance,live_simple",
        "--oracle",
        "--max-rows",
        "3",
        "--output",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    categories = json.loads(out.read_text())["categories"]
    assert {k: (v["accuracy"], v["rows"]) for k, v in categories.items()} == {
        "simple_python": (1.0, 3),
        "irrelevance": (1.0, 3),
        "live_simple": (1.0, 3),
    }
