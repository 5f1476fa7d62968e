"""Irrelevance rows for router training (verl.router.irrelevance; docs/router.md "Irrelevance rows")."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl.router.families import TOOL_FAMILIES_KEY, parse_tools_block, system_text_of
from verl.router.irrelevance import (
    NO_CALL_GROUND_TRUTH,
    SOURCE_KEY,
    add_irrelevance_rows,
    called_tool_names,
    irrelevant_prompt,
    main,
)
from verl.router.preprocess import LABEL_COLUMN
from verl.utils.dataset.rlla_prompt import render_system
from verl.utils.reward_score.rlla import RewardSwitches, compute_score

THINK = "<think> I should use the appropriate tool with proper parameters to respond to the user's need. </think>\n"
TOOLS = {
    name: (name, f"Get the {name} of a city", {"city": {"description": "the city", "type": "string"}})
    for name in ("weather", "population", "area", "mayor")
}


def _gt(*calls):
    return (
        THINK
        + "<tool_call>\n"
        + "\n".join(json.dumps({"name": n, "parameters": {"city": "Oslo"}}) for n in calls)
        + "\n</tool_call>"
    )


def _row(index, tools, gt, question="What about Oslo?"):
    return {
        "data_source": "rlla",
        "prompt": [
            {"role": "system", "content": render_system([TOOLS[t] for t in tools])},
            {"role": "user", "content": f"**Dialogue Records History**\n<user> {question} </user>"},
        ],
        "reward_model": {"ground_truth": gt, "style": "rule"},
        "extra_info": {"index": index, "split": "train", "instruction": "the system message", "output": gt},
    }


def _table(rows):
    return pa.Table.from_pylist(rows)


def _tools_of(row):
    return parse_tools_block(system_text_of(row["prompt"])).names


def test_called_tool_names():
    assert called_tool_names(_gt("weather", "area", "weather")) == {"weather", "area"}
    assert called_tool_names("<think> x </think>\n<response> hi </response>") == set()


def test_removes_the_called_tools_and_renumbers():
    row = _row(0, ["weather", "population", "area"], _gt("weather"))
    prompt = irrelevant_prompt(row["prompt"], {"weather"})
    system = prompt[0]["content"]
    # exactly the system message RLLA would have for the other two tools, numbered from 1; the dialogue unchanged
    assert system == render_system([TOOLS["population"], TOOLS["area"]])
    assert "1. Name: population\n" in system and "2. Name: area\n" in system
    assert prompt[1] == row["prompt"][1]
    # nothing to remove: the message is rebuilt byte for byte
    assert irrelevant_prompt(row["prompt"], {"mayor"})[0]["content"] == row["prompt"][0]["content"]


def test_donor_tools_when_none_is_left():
    row = _row(0, ["weather"], _gt("weather"))
    donors = [
        _row(1, ["weather", "area"], _gt("area"))["prompt"],  # lists the called tool: skipped
        _row(2, ["mayor", "population"], _gt("mayor"))["prompt"],
    ]
    prompt = irrelevant_prompt(row["prompt"], {"weather"}, donors)
    assert prompt[0]["content"] == render_system([TOOLS["mayor"], TOOLS["population"]])
    assert prompt[1]["content"].endswith("<user> What about Oslo? </user>")  # the source's question
    assert irrelevant_prompt(row["prompt"], {"weather"}, donors[:1]) is None  # no donor without the called tool
    assert irrelevant_prompt([{"role": "system", "content": "no tools"}], {"weather"}) is None


def test_table_rows_labels_and_indices():
    rows = [
        _row(10, ["weather", "area"], _gt("weather")),
        _row(11, ["population"], "<think> x </think>\n<response> Which city? </response>"),
        _row(12, ["mayor", "area"], _gt("mayor", "area")),
        _row(13, ["area", "population"], _gt("population")),
        _row(14, ["weather", "population"], _gt("weather")),
    ]
    out = add_irrelevance_rows(_table(rows), fraction=1.0, seed=0).to_pylist()
    assert len(out) == 9  # the 4 rows with a call each give one, after the 5 originals
    for original, kept in zip(rows, out[:5]):
        assert kept["prompt"] == original["prompt"] and kept["reward_model"] == original["reward_model"]
        assert kept["extra_info"][SOURCE_KEY] == -1
    new = out[5:]
    assert sorted(r["extra_info"]["index"] for r in new) == [15, 16, 17, 18]
    by_source = {r["extra_info"][SOURCE_KEY]: r for r in new}
    # 12 calls both its tools: it borrows the list of the only row holding neither mayor nor area (14's)
    assert {s: _tools_of(r) for s, r in by_source.items()} == {
        10: ["area"],
        12: ["weather", "population"],
        13: ["area"],
        14: ["population"],
    }
    by_index = {r["extra_info"]["index"]: r for r in rows}
    for source, r in by_source.items():
        assert r["reward_model"]["ground_truth"] == NO_CALL_GROUND_TRUTH
        assert r[LABEL_COLUMN] == "ANSWER"
        assert r["prompt"][1] == by_index[source]["prompt"][1]  # the source's question
        assert list(json.loads(r["extra_info"][TOOL_FAMILIES_KEY])) == _tools_of(r)
        assert r["extra_info"]["instruction"] == r["prompt"][0]["content"]
        assert r["extra_info"]["output"] == NO_CALL_GROUND_TRUTH
    # a fraction draws that many rows, the same ones for the same seed
    half = add_irrelevance_rows(_table(rows), fraction=0.5, seed=3).to_pylist()
    assert len(half) == 7 and half == add_irrelevance_rows(_table(rows), fraction=0.5, seed=3).to_pylist()


def test_errors_name_the_problem():
    rows = [_row(0, ["weather"], _gt("weather")), _row(1, ["area"], _gt("area"))]
    with pytest.raises(ValueError, match="fraction"):
        add_irrelevance_rows(_table(rows), fraction=0)
    with pytest.raises(ValueError, match="fraction"):
        add_irrelevance_rows(_table(rows), fraction=1.5)
    lonely = [_row(0, ["weather"], _gt("weather"))]  # no tool left and no donor
    with pytest.raises(ValueError, match="asked for 1 irrelevance rows, only 0"):
        add_irrelevance_rows(_table(lonely), fraction=1.0)
    with pytest.raises(ValueError, match="missing column 'prompt'"):
        add_irrelevance_rows(_table(rows).drop_columns(["prompt"]), fraction=0.5, source="f.parquet")
    bad = [dict(rows[0], extra_info={**rows[0]["extra_info"], "index": None})]
    with pytest.raises(ValueError, match=r"f.parquet:0: extra_info.index"):
        add_irrelevance_rows(_table(bad), fraction=1.0, source="f.parquet")


def test_toolrl_reward_on_a_new_row():
    """ToolRL's reward of the no-call ground truth: the format term for think + response without a call, 0
    correctness whatever is said; a tool call loses the format term (docs/router.md "Irrelevance rows")."""
    sw = RewardSwitches()
    answer = compute_score(
        "<think> none fits </think>\n<response> I cannot look that up. </response>",
        NO_CALL_GROUND_TRUTH,
        wrapper="none",
        switches=sw,
    )
    call = compute_score(_gt("population"), NO_CALL_GROUND_TRUTH, wrapper="none", switches=sw)
    assert answer[1:3] == (1.0, 0.0)
    assert call[1:3] == (0.0, 0.0)


def test_cli_on_the_real_test_split(shared_dir, tmp_path):
    src = shared_dir / "data" / "rlla_4k" / "test.parquet"
    out = tmp_path / "irrel.parquet"
    assert main(["--input", str(src), "--output", str(out), "--fraction", "0.25", "--seed", "1"]) == 0
    table, original = pq.read_table(out), pq.read_table(src)
    with_call = sum("<tool_call>" in r["ground_truth"] for r in original.column("reward_model").to_pylist())
    assert table.num_rows == original.num_rows + round(0.25 * with_call)
    new = table.to_pylist()[original.num_rows :]
    assert all(r[LABEL_COLUMN] == "ANSWER" and r["extra_info"][SOURCE_KEY] >= 0 for r in new)


def test_prepare_train_file_builds_once_and_again_only_when_its_input_changes(tmp_path, monkeypatch, capsys):
    """The main job's form (run_router_training.sh, IRRELEVANCE_FRACTION): the file beside train_router.parquet equals
    add_irrelevance_rows of it; kept when up to date, rebuilt when the input changed; its path on stdout."""
    from verl.router import irrelevance

    rows = [_row(i, ["weather", "population", "area"], _gt(["weather", "population", "area"][i % 3])) for i in range(8)]
    pq.write_table(_table(rows), tmp_path / "train_router.parquet")
    out = irrelevance.prepare_train_file(tmp_path, 0.5, seed=3)
    assert out == tmp_path / "train_router_irrelevance_f0.5_s3.parquet"
    expected = add_irrelevance_rows(_table(rows), 0.5, seed=3)
    assert pq.read_table(out).to_pylist() == expected.to_pylist()
    assert pq.read_table(out).num_rows == 8 + 4

    built = []
    real = irrelevance.add_irrelevance_rows
    monkeypatch.setattr(irrelevance, "add_irrelevance_rows", lambda *a, **k: built.append(1) or real(*a, **k))
    stamp = out.stat().st_mtime_ns
    assert main(["--data_dir", str(tmp_path), "--fraction", "0.5", "--seed", "3"]) == 0
    assert capsys.readouterr().out == f"{out}\n" and built == [] and out.stat().st_mtime_ns == stamp  # up to date

    rows[0] = _row(0, ["weather", "mayor"], _gt("weather"))  # the input changed: rebuilt from the new rows
    pq.write_table(_table(rows), tmp_path / "train_router.parquet")
    irrelevance.prepare_train_file(tmp_path, 0.5, seed=3)
    assert built == [1]
    assert pq.read_table(out).to_pylist() == real(_table(rows), 0.5, seed=3).to_pylist()
    irrelevance.prepare_train_file(tmp_path, 0.5, seed=4)  # another seed: a file of its own
    assert built == [1, 1] and (tmp_path / "train_router_irrelevance_f0.5_s4.parquet").is_file()

    pq.write_table(_table(rows), out)  # a file without the build record (made elsewhere) is not trusted
    irrelevance.prepare_train_file(tmp_path, 0.5, seed=3)
    assert built == [1, 1, 1] and pq.read_table(out).num_rows == 12


def test_prepare_train_file_errors(tmp_path):
    from verl.router.irrelevance import prepare_train_file

    with pytest.raises(FileNotFoundError, match=r"train_router.parquet: no such file \(python -m verl.router.prep"):
        prepare_train_file(tmp_path, 0.25)
    with pytest.raises(ValueError, match="fraction"):
        prepare_train_file(tmp_path, 0.0)
    with pytest.raises(SystemExit):  # --output belongs to --input
        main(["--data_dir", str(tmp_path), "--output", str(tmp_path / "x.parquet"), "--fraction", "0.25"])
