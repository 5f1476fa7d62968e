"""Weak labels and the *_router.parquet files on the real RLLA test split."""

import json
import shutil

import pyarrow.parquet as pq
import pytest

from verl.router import RouterAction, ToolFamily
from verl.router.families import TOOL_FAMILIES_KEY, parse_tools_block
from verl.router.preprocess import LABEL_COLUMN, main, preprocess_dir, weak_label

S, C, O = ToolFamily.SEARCH, ToolFamily.CALCULATE, ToolFamily.OTHER
THINK = "<think> I should use the appropriate tool with proper parameters to respond to the user's need. </think>\n"


def _gt(*calls):
    return (
        THINK + "<tool_call>\n" + "\n".join(json.dumps({"name": n, "parameters": {}}) for n in calls) + "\n</tool_call>"
    )


def test_weak_label_rules():
    fam = {"news": S, "add": C, "sms": O}
    assert weak_label("<think> x </think>\n<response> hi </response>", fam) == "ANSWER"
    assert weak_label(_gt("news", "news"), fam) == "SEARCH"
    assert weak_label(_gt("add"), fam) == "CALCULATE"
    assert weak_label(_gt("news", "add"), fam) == "MIXED"
    assert weak_label(_gt("sms"), fam) == "SEARCH"  # OTHER is search-like by default
    assert weak_label(_gt("sms"), fam, other_as=None) == "MIXED"
    assert weak_label(_gt("sms", "add"), fam, other_as=RouterAction.CALCULATE) == "CALCULATE"
    assert weak_label(THINK + "<tool_call>\n{broken\n</tool_call>", fam) == "MIXED"
    # a thought quoting <tool_call> is not a call (17 RLLA SFT rows do this)
    assert weak_label("<think> I could use <tool_call> here </think>\n<response> ok </response>", fam) == "ANSWER"


@pytest.fixture(scope="module")
def labelled(shared_dir, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("rlla")
    shutil.copy(shared_dir / "data" / "rlla_4k" / "test.parquet", data_dir / "test.parquet")
    result = preprocess_dir(data_dir)
    return data_dir, result


def test_real_test_split_labels(labelled):
    data_dir, result = labelled
    assert set(result) == {"test"}  # train.parquet absent -> skipped
    src = pq.read_table(data_dir / "test.parquet")
    out = pq.read_table(data_dir / "test_router.parquet")
    labels = out.column(LABEL_COLUMN).to_pylist()
    gts = [r["ground_truth"] for r in src.column("reward_model").to_pylist()]
    # ANSWER exactly on the ground truths without a tool call (9 response-only rows in ToolRL's split)
    assert [lbl == "ANSWER" for lbl in labels] == ["<tool_call>" not in gt for gt in gts]
    assert labels.count("ANSWER") == 9
    assert result["test"]["labels"] == {"SEARCH": 52, "ANSWER": 9, "CALCULATE": 13, "MIXED": 6}
    assert labels[0] == "SEARCH"  # GetNews
    assert labels[3] == "CALCULATE"  # calculate_investment_return
    assert labels[25] == "MIXED"  # forum.user_engagement_tracker (OTHER->search) + forum.post_analysis (calculate)


def test_schema_otherwise_unchanged(labelled):
    data_dir, _ = labelled
    src = pq.read_table(data_dir / "test.parquet")
    out = pq.read_table(data_dir / "test_router.parquet")
    assert out.column_names == src.column_names + [LABEL_COLUMN]
    for name in src.column_names:
        if name != "extra_info":
            assert out.column(name).equals(src.column(name)), name
    src_extra, out_extra = src.column("extra_info").to_pylist(), out.column("extra_info").to_pylist()
    out_type = out.schema.field("extra_info").type
    assert [f.name for f in out_type] == [f.name for f in src.schema.field("extra_info").type] + [TOOL_FAMILIES_KEY]
    for row, (a, b) in enumerate(zip(src_extra, out_extra)):
        families = json.loads(b.pop(TOOL_FAMILIES_KEY))
        assert a == b
        system = src.column("prompt")[row].as_py()[0]["content"]
        assert list(families) == list(dict.fromkeys(parse_tools_block(system).names))
        assert set(families.values()) <= {"SEARCH", "CALCULATE", "OTHER"}


def test_cli_with_sidecar_and_rerun(labelled, tmp_path):
    data_dir, _ = labelled
    side = tmp_path / "fam.json"
    side.write_text(json.dumps({"GetNews": "CALCULATE"}))
    assert main(["--data_dir", str(data_dir), "--tool_family_file", str(side)]) == 0
    out = pq.read_table(data_dir / "test_router.parquet")
    assert out.column(LABEL_COLUMN)[0].as_py() == "CALCULATE"  # row 0 calls GetNews
    assert json.loads(out.column("extra_info")[0].as_py()[TOOL_FAMILIES_KEY])["GetNews"] == "CALCULATE"
    assert out.column_names.count(LABEL_COLUMN) == 1
    preprocess_dir(data_dir)  # restore the default labels for other tests' expectations


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="none of"):
        preprocess_dir(tmp_path)


def test_router_parquet_feeds_the_dataset(labelled, tokenizer):
    from verl.router import target_action_ids
    from verl.router.families import row_tool_families
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    data_dir, _ = labelled
    dataset = RLHFDataset(
        [str(data_dir / "test_router.parquet")],
        tokenizer,
        max_prompt_length=2048,
        truncation="left",
        return_raw_chat=True,
    )
    batch = collate_fn([dataset[i] for i in range(4)])
    assert target_action_ids(batch[LABEL_COLUMN]).tolist() == [1, 0, 1, 2]  # row 1 is response-only
    families = row_tool_families(batch["raw_prompt"][0], batch["extra_info"][0])
    assert families == {"GetPowerBINews": S, "SingleOffer": S, "Domain WHOIS Lookup API": S, "GetNews": S}
