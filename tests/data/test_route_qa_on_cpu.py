"""route_qa: the seeded task's splits, its corpus, its oracle calls, its reward and its schema check."""

import json
import re

import pyarrow.parquet as pq
import pytest

from agent_system.tools.builtin import calculator, search_tool
from verl.router import RouterAction
from verl.router.families import offered_tools
from verl.utils.dataset import route_qa
from verl.utils.dataset.validate_data import main as validate_main
from verl.utils.dataset.validate_data import row_problems
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.route_qa import compute_score, final_answer

SIZES = {"train": 300, "val": 30, "test": 120}


@pytest.fixture(scope="module")
def task():
    return route_qa.generate(0, SIZES)


def test_same_seed_same_rows_other_seed_other_rows(task):
    again = route_qa.generate(0, SIZES)
    assert again == task
    other, _ = route_qa.generate(1, SIZES)
    assert [r["prompt"] for r in other["test"]] != [r["prompt"] for r in task[0]["test"]]


def test_kinds_in_equal_thirds_and_direct_split_in_halves(task):
    rows, _ = task
    for split, n in SIZES.items():
        kinds = [r["extra_info"]["kind"] for r in rows[split]]
        assert len(kinds) == n
        counts = {k: kinds.count(k) for k in route_qa.KINDS}
        assert max(counts.values()) - min(counts.values()) <= 1, (split, counts)
        subkinds = [r["extra_info"]["subkind"] for r in rows[split] if r["extra_info"]["kind"] == "direct"]
        assert abs(subkinds.count("direct_arithmetic") - subkinds.count("direct_fact")) <= 1
        share = sum(r["extra_info"]["needs_tool"] for r in rows[split]) / n
        assert share == pytest.approx(2 / 3, abs=1 / n)


def test_index_is_unique_and_rows_are_schema_valid(task):
    rows, _ = task
    every = [r for split in route_qa.SPLITS for r in rows[split]]
    assert sorted(r["extra_info"]["index"] for r in every) == list(range(len(every)))
    assert all(row_problems(r) == [] for r in every)


def _countries(rows):
    names = set()
    for r in rows:
        call = r["extra_info"]["call"]
        if r["extra_info"]["tool"] == "search":
            names.add(json.loads(call)["parameters"]["query"].split(" of ")[-1])
    return names


def test_splits_share_no_country_and_test_templates_are_unseen(task):
    rows, _ = task
    train, val, test = (_countries(rows[s]) for s in route_qa.SPLITS)
    assert train and val and test
    assert not (train & test) and not (val & test) and not (train & val)
    seen = {r["extra_info"]["template"] for s in ("train", "val") for r in rows[s]}
    unseen = {r["extra_info"]["template"] for r in rows["test"]}
    assert seen and unseen and not (seen & unseen)
    train_questions = " ".join(r["prompt"][1]["content"] for r in rows["train"])
    for phrase in ("I need to know", "Can you work out", "Give me", "Quick question"):
        assert phrase not in train_questions
    # the templates are shared by the kinds: each train template asks every kind
    for t in range(len(route_qa.TEMPLATES["train"])):
        kinds = {r["extra_info"]["kind"] for r in rows["train"] if r["extra_info"]["template"] == f"train:{t}"}
        assert kinds == set(route_qa.KINDS)


def test_answers_hold_and_the_oracle_call_finds_them(task):
    rows, corpus = task
    search = search_tool(documents=corpus)
    families = {"calculator": "calculate", "search": "search"}
    for r in rows["test"] + rows["train"][:60]:
        extra, answer = r["extra_info"], r["reward_model"]["ground_truth"]
        question = r["prompt"][1]["content"]
        if extra["subkind"] in ("arithmetic", "direct_arithmetic"):
            a, b = (int(x) for x in re.findall(r"\d+", question))
            assert answer in {str(a + b), str(a - b), str(a * b), str(b - a)}
            small = extra["subkind"] == "direct_arithmetic"
            assert (a < 10 and b < 10) if small else (a >= 100 and b >= 100)
        call = json.loads(extra["call"])  # every question has a call that answers it, a direct one too
        assert call["name"] == extra["tool"] == ("calculator" if "arithmetic" in extra["subkind"] else "search")
        if extra["needs_tool"]:
            assert call["name"] in offered_tools(RouterAction[route_qa.ROUTE_OF_KIND[extra["kind"]]], families)
        if call["name"] == "calculator":
            assert calculator(**call["parameters"]) == answer
        else:
            top = search(**call["parameters"]).splitlines()[0]
            assert answer in top, (call, top)
            assert (answer in question) is (not extra["needs_tool"])  # a fact question: only the corpus knows it


def test_write_task_files(tmp_path, capsys):
    assert route_qa.main(["--output_dir", str(tmp_path), "--train", "30", "--val", "6", "--test", "12"]) == 0
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["sizes"] == {"train": 30, "val": 6, "test": 12}
    assert meta["kinds"]["train"] == {"arithmetic": 10, "fact": 10, "direct": 10}
    assert meta["tool_share"]["test"] == pytest.approx(2 / 3)
    assert json.loads(capsys.readouterr().out) == meta
    docs = [json.loads(line) for line in (tmp_path / "corpus.jsonl").read_text().splitlines()]
    assert len(docs) == meta["corpus_documents"] == 30  # at least 10 countries per split
    rows = pq.read_table(tmp_path / "test.parquet").to_pylist()
    assert len(rows) == 12 and rows[0]["data_source"] == "route_qa"
    assert validate_main([str(tmp_path / "test.parquet"), "--tokenizer", "none"]) == 0


def test_validate_data_names_a_corrupted_route_qa_row(tmp_path, capsys):
    route_qa.write_task(tmp_path, train=3, val=3, test=9)
    table = pq.read_table(tmp_path / "test.parquet")
    rows = table.to_pylist()
    tool_rows = [i for i, r in enumerate(rows) if r["extra_info"]["needs_tool"]]
    direct = next(i for i, r in enumerate(rows) if not r["extra_info"]["needs_tool"])
    rows[tool_rows[0]]["extra_info"]["call"] = "not json"
    rows[tool_rows[1]]["extra_info"]["needs_tool"] = False
    rows[direct]["extra_info"]["kind"] = "chat"
    path = tmp_path / "corrupt.parquet"
    pq.write_table(table.from_pylist(rows, schema=table.schema), path)
    assert validate_main([str(path), "--tokenizer", "none"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:{tool_rows[0]}: extra_info.call: expected the answering call" in err
    assert f"{path}:{tool_rows[1]}: extra_info.needs_tool: expected True" in err
    assert f"{path}:{direct}: extra_info.kind: expected one of arithmetic, fact, direct, got 'chat'" in err


def test_generate_refuses_bad_sizes():
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        route_qa.generate(0, {"dev": 10})
    with pytest.raises(ValueError, match="test needs at least 3 rows"):
        route_qa.generate(0, {"test": 2})


@pytest.mark.parametrize(
    "text, truth, score, fmt, pred",
    [
        ("<response>1234</response>", "1234", 1.0, 1.0, "1234"),
        ("<response> Brasko. </response>", "brasko", 1.0, 1.0, "Brasko."),
        ("<response>1,234</response>", "1234", 0.0, 1.0, "1,234"),
        ("The answer is 1234.", "1234", 0.0, 0.0, ""),
        ("<response>12</response> then <response>1234</response>", "1234", 1.0, 1.0, "1234"),
        ('<tool_call>{"name": "calculator"}</tool_call><response>1234', "1234", 0.0, 0.0, ""),
    ],
)
def test_reward_exact_match_on_the_last_response(text, truth, score, fmt, pred):
    out = compute_score(text, truth)
    assert out == {"score": score, "correctness": score, "format": fmt, "pred": pred}
    assert default_compute_score("route_qa", text, truth) == out


def test_reward_refuses_a_non_string_truth_and_unknown_sources_name_both():
    with pytest.raises(TypeError, match="must be a string, got int"):
        compute_score("<response>3</response>", 3)
    with pytest.raises(NotImplementedError, match="'rlla' and 'route_qa' are built in"):
        default_compute_score("gsm8k", "x", "y")
    assert final_answer("no answer") is None
