"""``verl.utils.jsonl``: the one JSON / JSONL reader; every decoding error names the file, the line and the problem."""

from __future__ import annotations

import json
import pickle

import pytest

from verl.utils.dataset.api_bank import load_api_bank
from verl.utils.dataset.rlla_data import load_raw_records
from verl.utils.jsonl import JsonInputError, iter_json_objects, load_json_file


def test_reads_objects_with_their_line_numbers(tmp_path):
    path = tmp_path / "ok.jsonl"
    # BOM, CRLF, a blank line, and a raw U+2028 inside a string (str.splitlines would break the line there)
    path.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}\r\n\n' + '{"b": "x\u2028y"}\n'.encode() + b'   \n{"c": []}')
    assert list(iter_json_objects(path)) == [(1, {"a": 1}), (3, {"b": "x\u2028y"}), (5, {"c": []})]
    assert list(iter_json_objects(path, '{"a": 1}\n\n{"b": 2}\n')) == [(1, {"a": 1}), (3, {"b": 2})]
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        list(iter_json_objects(tmp_path / "missing.jsonl"))


@pytest.mark.parametrize(
    "line, line_no, problem",
    [
        (b'{"k": "\xff"}', 2, "not valid UTF-8 (byte 0xff at column 8)"),
        ('{"k": "é", "v": "\xe9"}'.encode("latin-1"), 2, "not valid UTF-8 (byte 0xe9 at column 8)"),
        (b'{"\xc3\xa9": "\xff"}', 2, "not valid UTF-8 (byte 0xff at column 8)"),  # columns count characters
        (b'{"k": 1,}', 2, "not valid JSON: Expecting property name enclosed in double quotes (column 9)"),
        (b'{"k": 1} {"k": 2}', 2, "not valid JSON: Extra data (column 10)"),
        (b"[1, 2]", 2, "expected a JSON object, got list"),
    ],
)
def test_bad_line_names_file_line_and_problem(tmp_path, line, line_no, problem):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"ok": true}\n' + line + b'\n{"ok": true}\n')
    rows = iter_json_objects(path)
    assert next(rows) == (1, {"ok": True})  # lazily: the lines before the bad one are yielded
    with pytest.raises(JsonInputError) as info:
        next(rows)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.path, err.line, err.problem) == (str(path), line_no, problem)
    assert str(err) == f"file {path}, line {line_no}: {problem}"
    clone = pickle.loads(pickle.dumps(err))
    assert str(clone) == str(err) and clone.line == line_no


def test_whole_json_file(tmp_path):
    path = tmp_path / "data.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"a": 1}], indent=1).encode())
    assert load_json_file(path) == [{"a": 1}]
    path.write_bytes(b'[\n {"a": 1},\n {"b": "caf\xe9"}\n]')
    with pytest.raises(JsonInputError, match=r", line 3: not valid UTF-8 \(byte 0xe9 at column 12\)$"):
        load_json_file(path)
    path.write_bytes(b'[\n {"a": 1},\n {"b" 2}\n]')
    with pytest.raises(JsonInputError, match=r", line 3: not valid JSON: Expecting ':' delimiter \(column 7\)$"):
        load_json_file(path)
    with pytest.raises(FileNotFoundError):
        load_json_file(tmp_path / "missing.json")


def test_dataset_loaders_use_the_reader(tmp_path):
    path = tmp_path / "level.json"
    path.write_bytes(b'[\n  {"system": "s", "user": "\xff"}\n]')
    with pytest.raises(JsonInputError, match=r"level\.json, line 2: not an API-Bank JSON file: not valid UTF-8"):
        load_api_bank(path)
    with pytest.raises(JsonInputError, match=r"level\.json, line 2: not valid UTF-8 \(byte 0xff at column 28\)"):
        load_raw_records(path)
