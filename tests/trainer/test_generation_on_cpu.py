"""main_generation / main_eval / the API-Bank loader: real data, hand-made scoring cases, a tiny-model end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from verl.trainer.config_utils import ConfigError
from verl.utils.reward_score import tool_formats
from verl.trainer.main_eval import evaluate_rows, main as eval_main, read_generations, score_prediction
from verl.trainer.main_generation import (
    length_sorted_batches,
    load_generation_config,
    resolve_data_format,
    run_generation,
)
from verl.utils.torch_functional import trim_left_padding
from verl.utils.dataset.api_bank import (
    API_BANK_DATA_SOURCE,
    api_bank_rlla_rows,
    load_api_bank,
    tool_calls_to_ground_truth,
)
from verl.utils.reward_score.rlla import compute_score, parse_ground_truth_tools

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def api_bank_file(shared_dir) -> Path:
    return shared_dir / "data" / "api_bank" / "level-1-api_processed.json"


# ---------------------------------------------------------------------------------------------------------------------
# API-Bank loader
# ---------------------------------------------------------------------------------------------------------------------
def test_api_bank_loader_real_file(api_bank_file, tokenizer):
    raw = load_api_bank(api_bank_file)
    rows = api_bank_rlla_rows(api_bank_file)
    assert len(raw) == len(rows) == 399
    assert all(len(r["answer"]) == 1 for r in raw)  # level-1: one call per row (the order rule never applies)
    for i, (src, row) in enumerate(zip(raw, rows)):
        assert row["data_source"] == API_BANK_DATA_SOURCE
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["prompt"][0]["content"] == src["system"] and row["prompt"][1]["content"] == src["user"]
        assert row["extra_info"]["index"] == i
        gt = row["reward_model"]["ground_truth"]
        assert parse_ground_truth_tools(gt) == src["answer"]  # the RLLA reward reads the calls back exactly
    text = tokenizer.apply_chat_template(rows[0]["prompt"], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and "ModifyRegistration" in text
    # the ground truth is a perfect RLLA answer to itself: maximal format and correctness
    assert compute_score(
        rows[0]["reward_model"]["ground_truth"], rows[0]["reward_model"]["ground_truth"], wrapper="qwen"
    )[:3] == (4.0, 1.0, 3.0)


def test_api_bank_loader_errors_name_row_and_key(tmp_path):
    bad = [
        {"system": "s", "user": "u", "answer": [{"name": "A", "parameters": {}}]},
        {"system": "s", "user": "u", "answer": [{"name": "B", "parameters": "x=1"}]},
    ]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad\.json:1: answer\[0\]: parameters"):
        load_api_bank(path)
    path.write_text(json.dumps([{"system": "s", "user": " ", "answer": []}]))
    with pytest.raises(ValueError, match=r"bad\.json:0: user"):
        load_api_bank(path)
    with pytest.raises(FileNotFoundError):
        load_api_bank(tmp_path / "missing.json")
    path.write_bytes(b"PAR1\x00\xff")  # e.g. a parquet file passed with data.format=api_bank
    with pytest.raises(ValueError, match="not an API-Bank JSON file"):
        load_api_bank(path)
    with pytest.raises(ValueError, match="no tool calls"):
        tool_calls_to_ground_truth([])


# ---------------------------------------------------------------------------------------------------------------------
# Exact-match scoring
# ---------------------------------------------------------------------------------------------------------------------
GT = [{"name": "QueryStock", "parameters": {"stock_code": "AAPL", "date": "2023-03-01"}}]


def _response(*calls: str) -> str:
    return "<think> x </think>\n<tool_call>\n" + "\n".join(calls) + "\n</tool_call><|im_end|>"


@pytest.mark.parametrize(
    "response, exact, name, failure",
    [
        (
            _response('{"name": "QueryStock", "parameters": {"stock_code": "AAPL", "date": "2023-03-01"}}'),
            True,
            True,
            False,
        ),
        (
            _response(
                '{"name": "QueryStock", "parameters": {"date": "2023-03-01", "stock_code": "AAPL"}}'
            ),  # key order
            True,
            True,
            False,
        ),
        (
            _response('{"name": "QueryStock", "arguments": {"date": "2023-03-01", "stock_code": "AAPL"}}'),  # alias
            True,
            True,
            False,
        ),
        (
            _response('{"name": "QueryStock", "parameters": {"stock_code": "MSFT", "date": "2023-03-01"}}'),  # value
            False,
            True,
            False,
        ),
        (
            _response('{"name": "QueryStock", "parameters": {"stock_code": "AAPL"}}'),  # missing parameter
            False,
            True,
            False,
        ),
        (
            _response(
                '{"name": "QueryStock", "parameters": {"stock_code": "AAPL", "date": "2023-03-01"}}',
                '{"name": "GetToday", "parameters": {}}',
            ),  # extra call
            False,
            False,
            False,
        ),
        (
            _response(
                '{"name": "QueryStock", "parameters": {"stock_code": "AAPL", "date": "2023-03-01"}}',
                '{"name": "QueryStock", "parameters": {"stock_code": "AAPL", "date": "2023-03-01"}}',
            ),  # duplicate
            False,
            False,
            False,
        ),
        (
            _response('{"name": "QueryStock", "parameters": {"stock_code": "AAPL", "date": "2023-03-01"}'),  # bad JSON
            False,
            False,
            True,
        ),
        (
            _response(
                '{"name": "QueryStock", "parameters": {"stock_code": "AAPL", "date": "2023-03-01"}}', "not json"
            ),  # one unreadable item spoils an otherwise right answer
            False,
            False,
            True,
        ),
        ('<think> x </think>\n<tool_call>\n{"name": "QueryStock"', False, False, True),  # unclosed block
        ("<think> x </think>\n<response> hi </response>", False, False, False),  # no call at all
    ],
)
def test_score_prediction_hand_cases(response, exact, name, failure):
    scored = score_prediction(response, GT)
    assert (scored["exact_match"], scored["name_match"], scored["parse_failure"]) == (exact, name, failure)


def test_score_prediction_order_and_types():
    two = [{"name": "A", "parameters": {"x": 1}}, {"name": "B", "parameters": {}}]
    swapped = _response('{"name": "B", "parameters": {}}', '{"name": "A", "parameters": {"x": 1}}')
    assert score_prediction(swapped, two)["exact_match"]  # order of simultaneous calls is irrelevant
    as_string = _response('{"name": "B", "parameters": {}}', '{"name": "A", "parameters": {"x": "1"}}')
    assert not score_prediction(as_string, two)["exact_match"]  # JSON types matter: "1" != 1
    assert score_prediction(as_string, two)["name_match"]


def test_evaluate_rows_counts():
    gt_call = tool_calls_to_ground_truth(GT)
    gt_none = "<think> I should directly respond to the user's need. </think>\n<response> Hello </response>"
    right = _response(json.dumps(GT[0]))
    rows = [
        {"response": right, "ground_truth": gt_call, "data_source": "rlla", "finished": True},
        {"response": _response("oops"), "ground_truth": gt_call, "data_source": "rlla", "finished": False},
        {
            "response": "<think> a </think>\n<response> Hello </response>",
            "ground_truth": gt_none,
            "data_source": "rlla",
            "finished": True,
        },
        {"response": "", "ground_truth_tool_calls": GT, "data_source": API_BANK_DATA_SOURCE},
    ]
    s = evaluate_rows(rows, switches=None)
    assert (s["rows"], s["tool_call_rows"], s["no_call_rows"]) == (4, 3, 1)
    assert s["exact_match_count"] == 1 and s["exact_match"] == pytest.approx(1 / 3)
    assert s["no_call_accuracy"] == 1.0 and s["overall_exact_match"] == pytest.approx(2 / 4)
    assert s["parse_failure_count"] == 1 and s["no_tool_call_rate"] == pytest.approx(2 / 4)
    assert s["finished_rate"] == pytest.approx(2 / 3)
    assert s["rlla_reward"]["rows"] == 3  # the row without a ground-truth string has no RLLA reward
    # format only checks the tag layout (all three pass); correctness: right 3, unreadable -3, response row 0
    assert s["rlla_reward"]["format"] == 1.0
    assert s["rlla_reward"]["correctness"] == pytest.approx(0.0)
    only_api = evaluate_rows(rows, dataset="api_bank")
    assert only_api["rows"] == 1 and only_api["exact_match"] == 0.0 and only_api["rlla_reward"]["rows"] == 0
    with pytest.raises(ValueError, match="dataset"):
        evaluate_rows(rows, dataset="nope")
    with pytest.raises(ValueError, match="no generation rows for dataset='bfcl'"):
        evaluate_rows(rows, dataset="bfcl")
    assert s["tool_cost"]["rows"] == s["rows"]  # every summary carries the tool-cost block


def test_read_generations_names_line(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"response": "x", "ground_truth": "y"}\n\n{"response": 3, "ground_truth": "y"}\n')
    with pytest.raises(ValueError, match=r"g\.jsonl:3: response"):
        read_generations(path)


# ---------------------------------------------------------------------------------------------------------------------
# Generation helpers
# ---------------------------------------------------------------------------------------------------------------------
def test_batching_and_trimming():
    assert length_sorted_batches([5, 1, 3, 1], 3) == [[1, 3, 2], [0]]
    with pytest.raises(ValueError):
        length_sorted_batches([1], 0)
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    ids = torch.tensor([[9, 9, 4, 5], [9, 6, 7, 8]])
    out = trim_left_padding({"input_ids": ids, "attention_mask": mask})
    assert out["input_ids"].tolist() == [[9, 4, 5], [6, 7, 8]] and out["attention_mask"].shape == (2, 3)
    assert resolve_data_format("x/level-1.JSON", "auto") == "api_bank"
    assert resolve_data_format("x/test.parquet", "auto") == "rlla"
    with pytest.raises(ConfigError):
        resolve_data_format("x", "csv")


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="output_path"):
        run_generation(load_generation_config(["data.max_samples=1"]))
    cfg = load_generation_config([f"data.output_path={tmp_path / 'o.jsonl'}", "data.n_samples=2"])
    with pytest.raises(ConfigError, match="n_samples"):
        run_generation(cfg)
    with pytest.raises(ConfigError, match="rollout.name='vllm': expected {hf}"):  # at load (the key table's range)
        load_generation_config([f"data.output_path={tmp_path / 'o.jsonl'}", "rollout.name=vllm"])


# ---------------------------------------------------------------------------------------------------------------------
# Tiny model end to end
# ---------------------------------------------------------------------------------------------------------------------
def _check_jsonl(path: Path, n: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == n
    assert [r["row"] for r in rows] == list(range(n))
    for r in rows:
        assert set(r) >= {"index", "prompt", "response", "tool_calls", "ground_truth", "ground_truth_tool_calls"}
        assert 1 <= r["response_tokens"] <= 8 and isinstance(r["tool_calls"], list)
    return rows


def test_generation_rlla_end_to_end(shared_dir, tiny_model_dir, tmp_path):
    parquet = shared_dir / "data" / "rlla_4k" / "test.parquet"
    out = tmp_path / "rlla.jsonl"
    summary = run_generation(
        load_generation_config(
            [
                f"data.path={parquet}",
                f"model.path={tiny_model_dir}",
                f"data.output_path={out}",
                "data.max_samples=3",
                "data.batch_size=2",
                "rollout.response_length=8",
                "trainer.device=cpu",
            ]
        )
    )
    rows = _check_jsonl(out, 3)
    frame = pd.read_parquet(parquet).head(3)
    expected_gt = [rm["ground_truth"] for rm in frame["reward_model"]]
    assert [r["ground_truth"] for r in rows] == expected_gt
    assert [r["index"] for r in rows] == [int(e["index"]) for e in frame["extra_info"]]
    n_call_rows = sum("<tool_call>" in gt for gt in expected_gt)
    assert summary["rows"] == 3 and summary["tool_call_rows"] == n_call_rows
    assert summary["no_call_rows"] == 3 - n_call_rows
    assert summary["rlla_reward"]["rows"] == 3 and summary["generation"]["prompts"] == 3
    assert summary["generation"]["new_tokens"] == sum(r["response_tokens"] for r in rows)
    on_disk = json.loads(Path(summary["summary_path"]).read_text())
    assert on_disk["rows"] == 3 and on_disk["output_path"] == str(out)
    assert not list(tmp_path.glob(".*tmp*"))  # atomic writes leave no temporary files


def test_generation_row_is_the_file_position_after_filtering(shared_dir, tiny_model_dir, tokenizer, tmp_path):
    """With data.filter_overlong_prompts, "row" stays the prompt's position in the file (not among the kept rows), so
    generation files made with different prompt limits pair on the prompts they share."""
    parquet = shared_dir / "data" / "rlla_4k" / "test.parquet"
    frame = pd.read_parquet(parquet).head(8)
    lengths = [
        len(
            tokenizer(
                tokenizer.apply_chat_template([dict(m) for m in p], add_generation_prompt=True, tokenize=False),
                add_special_tokens=False,
            )["input_ids"]
        )
        for p in frame["prompt"]
    ]
    limit = sorted(lengths)[4]  # keeps 5 of the 8 (ties aside), and drops some before the last kept one
    kept = [i for i, n in enumerate(lengths) if n <= limit]
    assert kept != list(range(len(kept)))  # the test needs a dropped row before a kept one
    out = tmp_path / "filtered.jsonl"
    run_generation(
        load_generation_config(
            [
                f"data.path={parquet}",
                f"model.path={tiny_model_dir}",
                f"data.output_path={out}",
                "data.max_samples=8",
                "data.filter_overlong_prompts=true",
                f"rollout.prompt_length={limit}",
                "data.batch_size=4",
                "rollout.response_length=2",
                "trainer.device=cpu",
                "eval.enable=false",
            ]
        )
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["row"] for r in rows] == kept
    assert [r["index"] for r in rows] == [int(frame["extra_info"].iloc[i]["index"]) for i in kept]


def test_generation_api_bank_cli_and_eval_cli(api_bank_file, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "api_bank.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_generation",
            f"data.path={api_bank_file}",
            f"model.path={tiny_model_dir}",
            f"data.output_path={out}",
            "data.max_samples=3",
            "rollout.response_length=8",
            "eval.enable=false",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[heartbeat]" in proc.stdout + proc.stderr  # not a TTY: heartbeat lines
    rows = _check_jsonl(out, 3)
    raw = load_api_bank(api_bank_file)[:3]
    assert [r["ground_truth_tool_calls"] for r in rows] == [r["answer"] for r in raw]
    assert {r["data_source"] for r in rows} == {API_BANK_DATA_SOURCE}
    assert not (tmp_path / "api_bank.summary.json").exists()  # eval.enable=false

    assert eval_main(["--generations", str(out), "--dataset", "api_bank"]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((tmp_path / "api_bank.summary.json").read_text())
    assert printed == written
    assert (written["rows"], written["tool_call_rows"], written["no_call_rows"]) == (3, 3, 0)
    assert written["parse_failure_count"] + round(written["no_tool_call_rate"] * 3) <= 3
    # rows of another benchmark only: one error line naming it, exit status 2
    assert eval_main(["--generations", str(out), "--dataset", "rlla"]) == 2


def test_generation_multi_turn_executes_the_calls(shared_dir, tiny_model_dir, tmp_path, monkeypatch):
    """rollout.multi_turn: every sample is an episode of the tool loop; with every turn read as a calculator call
    (the tiny model is random), each row records max_assistant_turns turns, the calculator's real results, and the
    observations inside the response."""
    from conftest import close_tool_loop_turns
    from agent_system.multi_turn_rollout import tool_loop

    close_tool_loop_turns(monkeypatch)
    call = {"name": "calculator", "parameters": {"expression": "6 * 7"}}
    monkeypatch.setattr(tool_loop, "parse_calls", lambda text, fmt: tool_formats.ParsedCalls((call,), True))
    out = tmp_path / "mt.jsonl"
    summary = run_generation(
        load_generation_config(
            [
                f"data.path={shared_dir / 'data' / 'rlla_4k' / 'test.parquet'}",
                f"model.path={tiny_model_dir}",
                f"data.output_path={out}",
                "data.max_samples=2",
                "data.n_samples=2",
                "rollout.do_sample=true",
                "rollout.response_length=64",
                "rollout.multi_turn.enable=true",
                "rollout.multi_turn.max_assistant_turns=2",
                "rollout.multi_turn.max_tokens_per_turn=4",
                "rollout.multi_turn.tools=[agent_system.tools.builtin:calculator]",
                "rollout.multi_turn.sandbox=none",
                "trainer.device=cpu",
            ]
        )
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["row"], r["sample"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in rows:
        assert r["num_turns"] == 2 and r["stop_reason"] == "max_turns" and not r["finished"]
        assert [t["content"] for t in r["tool_results"]] == ["42", "42"] and all(t["ok"] for t in r["tool_results"])
        assert "42" in r["response"]  # the first call's observation sits between the two turns
        assert r["policy_tokens"] == 8 < r["response_tokens"]
    assert summary["generation"]["new_tokens"] == 4 * 2 * 4  # the policy's tokens only: 4 episodes x 2 turns x 4
