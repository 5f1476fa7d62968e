"""RLLA preprocessing, default splits and data discovery (no network: the download step is injected or disabled)."""

import hashlib
import importlib.util
import json
import logging
import urllib.error
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from verl.utils.dataset import rlla_data
from verl.utils.dataset.rlla_data import (
    RESPONSE_THINK_PLACEHOLDER,
    TOOL_CALL_THINK_PLACEHOLDER,
    build_default_rlla_splits,
    placeholder_think,
    prompt_signature,
    resolve_rlla_data_dir,
    resolve_rlla_file,
    shuffle_and_split,
    write_rlla_parquet,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _schema(path) -> "pq.Schema":
    return pq.read_schema(path).remove_metadata()


@pytest.fixture(scope="module")
def built(tmp_path_factory, shared_dir):
    out = tmp_path_factory.mktemp("rlla_default")
    return build_default_rlla_splits(shared_dir / "data", out)


@pytest.fixture()
def clean_env(monkeypatch):
    for var in ("DATA_DIR", "TOOLRL_SHARED", "TOOLRL_OFFLINE"):
        monkeypatch.delenv(var, raising=False)


def _load_rlla_script():
    spec = importlib.util.spec_from_file_location("rlla_script", REPO_ROOT / "dataset" / "rlla_4k_raw" / "rlla.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------------- schema & split
def test_written_schema_equals_shared_test_schema(built, shared_dir):
    shared_schema = _schema(shared_dir / "data" / "rlla_4k" / "test.parquet")
    for name in ("train", "test", "sft_full"):
        assert _schema(built[name]).equals(shared_schema), name


def test_rlla_script_split_schema_and_indices(tmp_path, shared_dir):
    script = _load_rlla_script()
    raw = shared_dir / "data" / "rlla_4k_raw" / "rlla_sft.json"
    out = script.preprocess(raw, tmp_path / "a")
    train, test = pq.read_table(out["train"]).to_pylist(), pq.read_table(out["test"]).to_pylist()
    assert (len(train), len(test)) == (392, 8)  # int(0.02 * 400) = 8 test rows
    assert [r["extra_info"]["index"] for r in test] == list(range(8))
    assert {r["extra_info"]["split"] for r in train} == {"train"}
    assert {r["extra_info"]["split"] for r in test} == {"test"}
    row = test[0]
    assert row["data_source"] == "rlla" and row["ability"] == "math" and row["reward_model"]["style"] == "rule"
    assert row["prompt"][0] == {"role": "system", "content": row["extra_info"]["instruction"]}
    assert row["prompt"][1] == {"role": "user", "content": row["extra_info"]["input"]}
    assert row["reward_model"]["ground_truth"] == row["extra_info"]["output"]
    assert _schema(out["train"]).equals(_schema(shared_dir / "data" / "rlla_4k" / "test.parquet"))
    # the test rows are the last 8 of ToolRL's seeded shuffle
    records = json.loads(raw.read_text())
    np.random.seed(31415)
    np.random.shuffle(records)
    assert [r["extra_info"]["output"] for r in test] == [r["output"] for r in records[-8:]]
    # deterministic: a second run writes the same bytes
    again = script.preprocess(raw, tmp_path / "b")
    assert _sha(out["train"]) == _sha(again["train"]) and _sha(out["test"]) == _sha(again["test"])
    # another seed gives another split
    other = script.preprocess(raw, tmp_path / "c", seed=1)
    assert _sha(other["test"]) != _sha(out["test"])


def test_rlla_script_cli(tmp_path, shared_dir, capsys):
    script = _load_rlla_script()
    raw = shared_dir / "data" / "rlla_4k_raw" / "rlla_sft.json"
    assert script.main(["--input", str(raw), "--local_dir", str(tmp_path), "--seed", "7", "--test_frac", "0.1"]) == 0
    assert pq.read_metadata(tmp_path / "test.parquet").num_rows == 40
    assert "train:" in capsys.readouterr().out


def test_shuffle_and_split_matches_global_numpy_and_handles_zero_test():
    items = list(range(57))
    ref = list(items)
    np.random.seed(31415)
    np.random.shuffle(ref)
    train, test = shuffle_and_split(items, 31415, 0.1)
    assert test == ref[-5:] and train == ref[:-5]
    assert items == list(range(57))  # input untouched
    train, test = shuffle_and_split(items[:10], 31415, 0.02)  # int(0.2) = 0 test rows: ToolRL's slice gave no train
    assert len(train) == 10 and test == []
    with pytest.raises(ValueError, match="test_frac"):
        shuffle_and_split(items, 0, 1.5)


def test_malformed_raw_record_names_file_row_and_key(tmp_path):
    script = _load_rlla_script()
    raw = tmp_path / "bad.json"
    raw.write_text(json.dumps([{"instruction": "a", "input": "b", "output": "c"}, {"instruction": "a", "input": ""}]))
    with pytest.raises(ValueError, match=r"bad\.json:1: input: expected a non-empty string"):
        script.preprocess(raw, tmp_path / "out")
    raw.write_text(json.dumps({"instruction": "a"}))
    with pytest.raises(ValueError, match="expected a JSON list"):
        script.preprocess(raw, tmp_path / "out")


# --------------------------------------------------------------------------------------------------- placeholders
def test_placeholder_sentences_are_the_shared_ground_truths(shared_dir):
    truths = pq.read_table(shared_dir / "data" / "rlla_4k" / "test.parquet").column("reward_model").to_pylist()
    thinks = {r["ground_truth"].split("</think>")[0] + "</think>" for r in truths}
    assert thinks == {
        f"<think> {TOOL_CALL_THINK_PLACEHOLDER} </think>",
        f"<think> {RESPONSE_THINK_PLACEHOLDER} </think>",
    }


def test_placeholder_think_both_kinds_and_tool_call_mentioned_in_think():
    tool = '<think> long reasoning\nmore </think>\n<tool_call>\n{"name": "f", "parameters": {}}\n</tool_call>'
    assert placeholder_think(tool) == (
        f"<think> {TOOL_CALL_THINK_PLACEHOLDER} </think>\n<tool_call>\n"
        '{"name": "f", "parameters": {}}\n</tool_call>'
    )
    resp = "<think> no tool is needed </think>\n<response> Hello </response>"
    assert placeholder_think(resp) == f"<think> {RESPONSE_THINK_PLACEHOLDER} </think>\n<response> Hello </response>"
    # the think quotes <tool_call>, but the answer is a direct response: the response sentence applies
    tricky = "<think> I could emit <tool_call> but no tool fits </think>\n<response> Sorry </response>"
    assert placeholder_think(tricky).startswith(f"<think> {RESPONSE_THINK_PLACEHOLDER} </think>")
    with pytest.raises(ValueError, match="start with <think>"):
        placeholder_think("<tool_call>\n{}\n</tool_call>")
    with pytest.raises(ValueError, match="neither"):
        placeholder_think("<think> x </think> plain text")


def test_default_train_ground_truths(built, shared_dir):
    raw = json.loads((shared_dir / "data" / "rlla_4k_raw" / "rlla_sft.json").read_text())
    by_prompt = {(r["instruction"], r["input"]): r["output"] for r in raw}
    train = pq.read_table(built["train"]).to_pylist()
    sft = pq.read_table(built["sft_full"]).to_pylist()
    mentions = 0
    for row, full in zip(train, sft):
        assert row["prompt"] == full["prompt"]
        original = by_prompt[(row["extra_info"]["instruction"], row["extra_info"]["input"])]
        assert full["reward_model"]["ground_truth"] == original
        gt = row["reward_model"]["ground_truth"]
        assert gt == row["extra_info"]["output"]
        after = original.split("</think>", 1)[1]
        assert gt.endswith(after)
        expected = TOOL_CALL_THINK_PLACEHOLDER if "<tool_call>" in after else RESPONSE_THINK_PLACEHOLDER
        assert gt == f"<think> {expected} </think>{after}"
        mentions += "<tool_call>" in original.split("</think>", 1)[0]
    assert mentions == 17  # thinks quoting the literal tag were classified by the text after </think>
    assert [r["extra_info"]["index"] for r in train] == list(range(len(train)))


# --------------------------------------------------------------------------------------------------- dedup, determinism
def test_dedup_against_validation(built, shared_dir, tmp_path, caplog):
    val = {prompt_signature(p) for p in pq.read_table(built["test"]).column("prompt").to_pylist()}
    for name in ("train", "sft_full"):
        prompts = pq.read_table(built[name]).column("prompt").to_pylist()
        assert len(prompts) == 399  # one of the 400 SFT prompts is a validation prompt
        assert not {prompt_signature(p) for p in prompts} & val
    assert _sha(built["test"]) == _sha(shared_dir / "data" / "rlla_4k" / "test.parquet")  # unchanged copy
    # a synthetic shared folder: two raw rows repeat validation prompts
    shared = tmp_path / "shared_data"
    (shared / "rlla_4k_raw").mkdir(parents=True)
    raw = [
        {"instruction": f"sys {i}", "input": f"user {i}", "output": "<think> t </think>\n<response> r </response>"}
        for i in range(5)
    ]
    (shared / "rlla_4k_raw" / "rlla_sft.json").write_text(json.dumps(raw))
    write_rlla_parquet(
        [rlla_data.make_rlla_row(raw[i], j, "test") for j, i in enumerate((1, 3))], shared / "rlla_4k" / "test.parquet"
    )
    with caplog.at_level(logging.INFO, logger="verl.utils.dataset.rlla_data"):
        out = build_default_rlla_splits(shared, tmp_path / "out")
    assert "dropped 2 of 5" in caplog.text
    assert [r["input"] for r in pq.read_table(out["train"]).column("extra_info").to_pylist()] == [
        "user 0",
        "user 2",
        "user 4",
    ]


def test_default_splits_are_deterministic(built, shared_dir, tmp_path):
    again = build_default_rlla_splits(shared_dir / "data", tmp_path)
    for name in ("train", "test", "sft_full"):
        assert _sha(again[name]) == _sha(built[name]), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left behind


# --------------------------------------------------------------------------------------------------- discovery
def _fake_shared(tmp_path, shared_dir) -> Path:
    """A shared/ folder with only the data needed to build the default splits."""
    root = tmp_path / "shared"
    (root / "data" / "rlla_4k").mkdir(parents=True)
    (root / "data" / "rlla_4k_raw").mkdir(parents=True)
    for rel in ("rlla_4k/test.parquet", "rlla_4k_raw/rlla_sft.json"):
        (root / "data" / rel).write_bytes((shared_dir / "data" / rel).read_bytes())
    return root


def _put_splits(directory: Path, n_train: int = 3) -> Path:
    row = {"instruction": "s", "input": "u", "output": "<think> t </think>\n<response> r </response>"}
    write_rlla_parquet([rlla_data.make_rlla_row(row, i, "train") for i in range(n_train)], directory / "train.parquet")
    write_rlla_parquet([rlla_data.make_rlla_row(row, 0, "test")], directory / "test.parquet")
    return directory


def test_discovery_order_explicit_then_env_then_repo(tmp_path, clean_env, monkeypatch, caplog):
    root = tmp_path / "repo"
    repo_dir = _put_splits(root / "dataset" / "rlla_4k")
    explicit = _put_splits(tmp_path / "explicit")
    env_dir = _put_splits(tmp_path / "env")
    kw = dict(root=root, shared_dir=tmp_path / "no_shared", download=False)
    assert resolve_rlla_data_dir(explicit, **kw) == explicit.resolve()
    monkeypatch.setenv("DATA_DIR", str(env_dir))
    assert resolve_rlla_data_dir(None, **kw) == env_dir.resolve()
    assert resolve_rlla_data_dir(explicit, **kw) == explicit.resolve()  # the argument beats $DATA_DIR
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("DATA_DIR", str(empty))
    # an explicit folder without the files is an error, never a silent fall-back to other data ...
    with pytest.raises(FileNotFoundError, match="lacks train.parquet, test.parquet"):
        resolve_rlla_data_dir(None, **kw)
    # ... except the repository's own dataset/rlla_4k (ToolRL's DATA_DIR), which the search builds or finds
    monkeypatch.setenv("DATA_DIR", str(repo_dir))
    assert resolve_rlla_data_dir(None, **kw) == repo_dir.resolve()


def test_discovery_builds_from_shared(tmp_path, clean_env, monkeypatch, shared_dir):
    root = tmp_path / "repo"
    monkeypatch.setenv("TOOLRL_SHARED", str(_fake_shared(tmp_path, shared_dir)))

    def no_network(url, dest):
        raise AssertionError("must not download when shared/ can be built from")

    found = resolve_rlla_data_dir(root=root, downloader=no_network)
    assert found == root / "dataset" / "rlla_4k"
    assert sorted(p.name for p in found.iterdir()) == ["sft_full.parquet", "test.parquet", "train.parquet"]
    assert pq.read_metadata(found / "train.parquet").num_rows == 399


def test_discovery_downloads_when_nothing_local(tmp_path, clean_env, monkeypatch):
    root = tmp_path / "repo"
    source = _put_splits(tmp_path / "published", n_train=6)
    urls = []

    def fake_download(url, dest):
        urls.append(url)
        dest.write_bytes((source / Path(url).name).read_bytes())

    monkeypatch.setitem(rlla_data.TOOLRL_SHA256, "train.parquet", _sha(source / "train.parquet"))
    found = resolve_rlla_data_dir(root=root, shared_dir=tmp_path / "no_shared", download=True, downloader=fake_download)
    assert found == root / "dataset" / "rlla_4k"
    assert urls == [f"{rlla_data.TOOLRL_BASE_URL}/train.parquet", f"{rlla_data.TOOLRL_BASE_URL}/test.parquet"]
    assert urls[0].startswith("https://raw.githubusercontent.com/qiancheng0/ToolRL/")
    assert pq.read_metadata(found / "train.parquet").num_rows == 6


def test_discovery_checksum_mismatch_leaves_nothing_and_lists_places(tmp_path, clean_env):
    root = tmp_path / "repo"
    source = _put_splits(tmp_path / "published")

    def fake_download(url, dest):
        dest.write_bytes((source / Path(url).name).read_bytes())

    with pytest.raises(FileNotFoundError, match="differs from the pinned"):
        resolve_rlla_data_dir(root=root, shared_dir=tmp_path / "no_shared", download=True, downloader=fake_download)
    assert not any((root / "dataset" / "rlla_4k").iterdir())  # no partial or temporary file left


def test_discovery_error_lists_every_place(tmp_path, clean_env, monkeypatch):
    root = tmp_path / "repo"
    explicit = tmp_path / "mine"
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "from_env"))
    monkeypatch.setenv("TOOLRL_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="explicit data dir .*mine lacks"):
        resolve_rlla_data_dir(explicit, root=root, shared_dir=tmp_path / "no_shared")
    monkeypatch.delenv("DATA_DIR")
    with pytest.raises(FileNotFoundError) as info:
        resolve_rlla_data_dir(None, root=root, shared_dir=tmp_path / "no_shared")
    msg = str(info.value)
    for expected in (
        f"repository dataset/rlla_4k {root / 'dataset' / 'rlla_4k'}",
        str(tmp_path / "no_shared"),
        "download from ToolRL: disabled",
    ):
        assert expected in msg, (expected, msg)

    def offline(url, dest):
        raise urllib.error.URLError("no route to host")

    with pytest.raises(FileNotFoundError, match="no route to host"):
        resolve_rlla_data_dir(root=root, shared_dir=tmp_path / "no_shared", download=True, downloader=offline)


def test_resolve_sft_full_builds_only_the_missing_file(tmp_path, clean_env, monkeypatch, shared_dir):
    root = tmp_path / "repo"
    repo_dir = _put_splits(root / "dataset" / "rlla_4k", n_train=6)  # e.g. ToolRL's downloaded files
    before = _sha(repo_dir / "train.parquet")
    monkeypatch.setenv("TOOLRL_SHARED", str(_fake_shared(tmp_path, shared_dir)))
    path = resolve_rlla_file("sft_full.parquet", root=root, download=False)
    assert path == repo_dir / "sft_full.parquet" and pq.read_metadata(path).num_rows == 399
    assert _sha(repo_dir / "train.parquet") == before  # the downloaded split was not overwritten
    assert resolve_rlla_file("train", root=root, download=False) == (repo_dir / "train.parquet").resolve()
    with pytest.raises(ValueError, match="unknown RLLA file"):
        resolve_rlla_file("val", root=root)
