"""validate-data: the shared test split is valid; a corrupted copy fails with file:row: key: problem lines."""

import pyarrow.parquet as pq
import pytest

from verl.utils.dataset.validate_data import length_stats, main, row_problems


def test_shared_test_split_is_valid(shared_dir, tiny_model_dir, capsys):
    path = shared_dir / "data" / "rlla_4k" / "test.parquet"
    assert main([str(path), "--tokenizer", tiny_model_dir, "--max_prompt_length", "1024"]) == 0
    out = capsys.readouterr().out
    assert f"{path}: 80 rows, 80 valid, 0 problem(s)" in out
    assert "prompt        count=80 median=" in out and "ground_truth  count=80" in out
    over = int(out.split("prompts over max_prompt_length=1024: ")[1].split()[0])
    assert 0 < over < 80  # platform notes: test prompts run ~400-2,250 tokens


def test_corrupted_copy_names_rows(shared_dir, tmp_path, capsys):
    table = pq.read_table(shared_dir / "data" / "rlla_4k" / "test.parquet")
    rows = table.to_pylist()
    rows[5]["reward_model"]["ground_truth"] = ""
    rows[12]["prompt"] = []
    rows[30]["prompt"][1]["role"] = " "
    rows[41]["extra_info"]["index"] = None
    path = tmp_path / "corrupt.parquet"
    pq.write_table(table.from_pylist(rows, schema=table.schema), path)
    assert main([str(path), "--tokenizer", "none"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:5: reward_model.ground_truth: empty string" in err
    assert f"{path}:12: prompt: empty message list" in err
    assert f"{path}:30: prompt[1].role: expected a non-empty string" in err
    assert f"{path}:41: extra_info.index: missing" in err
    assert "INVALID: 4 problem(s)" in err


def test_empty_file_is_invalid(shared_dir, tmp_path, capsys):
    table = pq.read_table(shared_dir / "data" / "rlla_4k" / "test.parquet")
    path = tmp_path / "empty.parquet"
    pq.write_table(table.slice(0, 0), path)
    assert main([str(path), "--tokenizer", "none"]) == 1
    assert f"{path}: no rows" in capsys.readouterr().err


def test_unreadable_file_and_missing_columns(tmp_path, capsys):
    bad = tmp_path / "not.parquet"
    bad.write_text("hello")
    assert main([str(bad), "--tokenizer", "none"]) == 1
    assert f"{bad}: not a readable parquet file" in capsys.readouterr().err
    assert row_problems({"prompt": [{"role": "user", "content": "x"}]}) == [
        ("data_source", "missing"),
        ("ability", "missing"),
        ("reward_model", "missing"),
        ("extra_info", "missing"),
    ]
    assert ("reward_model.ground_truth", "missing") in row_problems(
        {
            "data_source": "d",
            "prompt": [{"role": "u", "content": "x"}],
            "ability": "a",
            "reward_model": {},
            "extra_info": {"index": 1},
        }
    )


def test_length_stats():
    assert length_stats([1, 2, 3, 4, 100]) == {"count": 5, "median": 3.0, "p90": pytest.approx(61.6), "max": 100}
    assert length_stats([])["count"] == 0


def test_ground_truths_the_reward_cannot_parse_are_named(shared_dir, tmp_path, capsys):
    """A <tool_call> that is not JSON, holds a NUL byte or nests 5,000 deep used to pass ("8 rows, 8 valid") and fail at
    reward time on every sample: the RLLA reward's own parser now reads each ground truth here (and in the trainer's
    pre-flight, which calls the same check)."""
    from verl.trainer.preflight import DataCheckError, check_data_files
    from verl.trainer.config_utils import load_default_config

    table = pq.read_table(shared_dir / "data" / "rlla_4k" / "test.parquet")
    rows = table.to_pylist()[:8]
    bad = {
        1: "<tool_call>\n{not json\n</tool_call>",
        2: '<tool_call>\n{"name": "a\x00b", "parameters": {}}\n</tool_call>',
        3: "<tool_call>\n" + "[" * 5000 + "]" * 5000 + "\n</tool_call>",
    }
    for i, truth in bad.items():
        rows[i]["reward_model"]["ground_truth"] = truth
    rows[4]["reward_model"]["ground_truth"] = "<response>no tool call at all</response>"  # nothing to parse: valid
    path = tmp_path / "bad_truths.parquet"
    pq.write_table(table.from_pylist(rows, schema=table.schema), path)
    assert main([str(path), "--tokenizer", "none"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:1: reward_model.ground_truth: line 0 of the <tool_call> block is not valid JSON" in err
    assert f"{path}:2: reward_model.ground_truth: line 0 of the <tool_call> block is not valid JSON" in err
    assert f"{path}:3: reward_model.ground_truth: its <tool_call> JSON nests too deep to parse" in err
    assert ":4:" not in err and "INVALID: 3 problem(s)" in err
    config = load_default_config([f"data.train_files={path}", f"data.val_files={path}"])
    with pytest.raises(DataCheckError, match=r"data.train_files: 3 problem\(s\)"):
        check_data_files(config)


def test_an_unknown_tokenizer_is_one_error_line(shared_dir, capsys):
    path = shared_dir / "data" / "rlla_4k" / "test.parquet"
    assert main([str(path), "--tokenizer", "/nonexistent_tokenizer"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("validate-data: error: --tokenizer=/nonexistent_tokenizer")
