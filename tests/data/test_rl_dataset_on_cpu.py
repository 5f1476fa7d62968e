"""RLHFDataset (both constructor styles, padding, truncation, filtering, malformed rows) and collate_fn."""

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from verl.utils.dataset import RLHFDataset, collate_fn
from verl.utils.dataset.rl_dataset import PromptTooLongError
from verl.utils.dataset.rlla_data import make_rlla_row, write_rlla_parquet

MAX_LEN = 48


def _rows(user_texts, indices=None):
    indices = indices or list(range(len(user_texts)))
    return [
        make_rlla_row(
            {"instruction": "You call tools.", "input": text, "output": f"<response> {i} </response>"}, idx, "train"
        )
        for i, (text, idx) in enumerate(zip(user_texts, indices))
    ]


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    """Three rows: short, medium, and one far longer than MAX_LEN tokens; non-trivial extra_info indices."""
    path = tmp_path_factory.mktemp("rl") / "rows.parquet"
    texts = ["Hi", "What is the weather in Paris today?", " ".join(["token"] * 200)]
    write_rlla_parquet(_rows(texts, [7, 42, 3]), path)
    return str(path)


def _ids(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_item_left_padding_position_ids_index_raw_prompt(parquet, tokenizer):
    ds = RLHFDataset(parquet, tokenizer, max_prompt_length=MAX_LEN, return_raw_chat=True, truncation="error")
    assert len(ds) == 3
    item = ds[1]
    messages = [
        {"role": "system", "content": "You call tools."},
        {"role": "user", "content": "What is the weather in Paris today?"},
    ]
    ids = _ids(tokenizer, messages)
    n, pad = len(ids), MAX_LEN - len(ids)
    assert 0 < n < MAX_LEN
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert item[key].shape == (MAX_LEN,) and item[key].dtype == torch.long
    assert item["input_ids"][pad:].tolist() == ids
    assert (item["input_ids"][:pad] == tokenizer.pad_token_id).all()
    assert item["attention_mask"].tolist() == [0] * pad + [1] * n
    assert item["position_ids"].tolist() == [0] * pad + list(range(n))
    assert item["index"] == 42
    assert item["raw_prompt"] == messages
    assert "prompt" not in item
    assert item["data_source"] == "rlla" and item["reward_model"]["ground_truth"] == "<response> 1 </response>"
    assert "raw_prompt" not in RLHFDataset(parquet, tokenizer, max_prompt_length=MAX_LEN)[0]


def test_truncation_modes(parquet, tokenizer):
    messages = [
        {"role": "system", "content": "You call tools."},
        {"role": "user", "content": " ".join(["token"] * 200)},
    ]
    full = _ids(tokenizer, messages)
    assert len(full) > MAX_LEN
    with pytest.raises(PromptTooLongError) as info:
        RLHFDataset(parquet, tokenizer, max_prompt_length=MAX_LEN)[2]
    assert f"{parquet}:2: prompt: {len(full)} tokens exceed max_prompt_length={MAX_LEN}" in str(info.value)
    left = RLHFDataset(parquet, tokenizer, max_prompt_length=MAX_LEN, truncation="left")[2]
    assert left["input_ids"].tolist() == full[-MAX_LEN:]
    right = RLHFDataset(parquet, tokenizer, max_prompt_length=MAX_LEN, truncation="right")[2]
    assert right["input_ids"].tolist() == full[:MAX_LEN]
    for item in (left, right):
        assert item["attention_mask"].sum() == MAX_LEN and item["position_ids"].tolist() == list(range(MAX_LEN))
    with pytest.raises(ValueError, match="truncation must be one of"):
        RLHFDataset(parquet, tokenizer, truncation="sideways")


def test_filter_overlong_prompts(parquet, tokenizer, caplog):
    with caplog.at_level(logging.INFO, logger="verl.utils.dataset.rl_dataset"):
        ds = RLHFDataset(parquet, tokenizer, max_prompt_length=MAX_LEN, filter_overlong_prompts=True)
    assert len(ds) == 2 and [ds[i]["index"] for i in range(2)] == [7, 42]
    assert "filtered 1 of 3" in caplog.text
    with pytest.raises(ValueError, match="all 3 prompts"):
        RLHFDataset(parquet, tokenizer, max_prompt_length=4, filter_overlong_prompts=True)


def test_upstream_constructor_with_config(parquet, tokenizer):
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": MAX_LEN,
            "truncation": "left",
            "filter_overlong_prompts": False,
            "return_raw_chat": True,
            "train_batch_size": 4,
            "max_samples": -1,
        }
    )
    ds = RLHFDataset(data_files=[parquet], tokenizer=tokenizer, config=config)
    assert len(ds) == 3 and ds[2]["input_ids"].shape == (MAX_LEN,) and "raw_prompt" in ds[0]
    positional = RLHFDataset([parquet], tokenizer, {"max_prompt_length": MAX_LEN}, None, 2)
    assert len(positional) == 2 and positional[1]["index"] == 42  # max_samples keeps the first rows
    assert positional.filter_overlong_prompts and positional.truncation == "error"  # upstream's defaults
    from_cfg = RLHFDataset(
        [parquet, parquet],
        tokenizer,
        {"max_prompt_length": MAX_LEN, "max_samples": 4, "filter_overlong_prompts": False},
    )
    assert len(from_cfg) == 4 and from_cfg[3]["index"] == 7  # second file, row 0
    toolrl = RLHFDataset(parquet, tokenizer, "prompt", MAX_LEN, True, True, "~/.cache/verl/rlhf", None, True, "right")
    assert toolrl.truncation == "right" and toolrl.return_raw_chat and len(toolrl) == 3
    with pytest.raises(TypeError, match="RLHFDataset"):
        RLHFDataset(parquet, tokenizer, "prompt", MAX_LEN, bogus=1)


def test_no_chat_template_joins_contents(parquet, tokenizer):
    """ToolRL's use_chat_template=False produced an empty prompt; here the contents are joined with newlines."""
    item = RLHFDataset(parquet, tokenizer, max_prompt_length=MAX_LEN, use_chat_template=False)[0]
    ids = item["input_ids"][item["attention_mask"].bool()]
    assert tokenizer.decode(ids) == "You call tools.\nHi"
    custom = RLHFDataset(
        parquet, tokenizer, max_prompt_length=MAX_LEN, chat_template_func=lambda msgs: "|".join(m["role"] for m in msgs)
    )[0]
    assert tokenizer.decode(custom["input_ids"][custom["attention_mask"].bool()]) == "system|user"


def _write_raw(path: Path, rows) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


GOOD = {"data_source": "rlla", "prompt": [{"role": "user", "content": "hi"}], "extra_info": {"index": 0}}


@pytest.mark.parametrize(
    "bad, key, problem, type_change",
    [
        ({"prompt": []}, "prompt", "empty message list", False),
        ({"prompt": [{"role": "user", "content": ""}]}, r"prompt\[0\]\.content", "non-empty string", False),
        ({"prompt": [{"role": "user"}]}, r"prompt\[0\]\.content", "non-empty string", False),
        ({"prompt": "just text"}, "prompt", "expected a non-empty list", True),
        ({"extra_info": {"index": "3"}}, r"extra_info\.index", "expected an int", True),
        ({"extra_info": "x"}, "extra_info", "expected an object", True),
    ],
)
def test_malformed_rows_name_file_row_and_key(tmp_path, tokenizer, bad, key, problem, type_change):
    # a value of another type cannot share a parquet column with good rows: then every row is bad and row 0 is named
    rows = [{**GOOD, **bad}] * 3 if type_change else [dict(GOOD), dict(GOOD), {**GOOD, **bad}]
    path = _write_raw(tmp_path / "bad.parquet", rows)
    row = 0 if type_change else 2
    with pytest.raises(ValueError, match=rf"bad\.parquet:{row}: {key}: .*{problem}"):
        RLHFDataset(path, tokenizer, max_prompt_length=MAX_LEN)


def test_missing_prompt_column_and_missing_file(tmp_path, tokenizer):
    path = _write_raw(tmp_path / "noprompt.parquet", [{"data_source": "rlla", "question": "hi"}])
    with pytest.raises(ValueError, match=r"noprompt\.parquet: missing column 'prompt'"):
        RLHFDataset(path, tokenizer)
    with pytest.raises(FileNotFoundError, match="nowhere.parquet"):
        RLHFDataset(str(tmp_path / "nowhere.parquet"), tokenizer)


def test_collate_fn_object_arrays_of_shape_b():
    rows = [
        {"ids": torch.arange(3) + i, "tags": ["a", "b"], "meta": {"k": i}, "text": f"s{i}", "index": i}
        for i in range(4)
    ]
    batch = collate_fn(rows)
    assert batch["ids"].shape == (4, 3) and batch["ids"][2].tolist() == [2, 3, 4]
    for key in ("tags", "meta", "text", "index"):
        assert isinstance(batch[key], np.ndarray) and batch[key].dtype == object and batch[key].shape == (4,), key
    assert batch["tags"][1] == ["a", "b"] and batch["meta"][3] == {"k": 3} and batch["text"][0] == "s0"
    with pytest.raises(ValueError, match="row 1 has keys"):
        collate_fn([{"a": 1}, {"b": 1}])
    with pytest.raises(ValueError, match="ids: tensors of different shapes"):
        collate_fn([{"ids": torch.zeros(2)}, {"ids": torch.zeros(3)}])
    with pytest.raises(ValueError, match="mixes tensors"):
        collate_fn([{"ids": torch.zeros(2)}, {"ids": [0, 0]}])


def test_dataloader_to_dataproto(parquet, tokenizer):
    protocol = pytest.importorskip("verl.protocol")
    ds = RLHFDataset(parquet, tokenizer, max_prompt_length=MAX_LEN, truncation="left", return_raw_chat=True)
    batch = next(iter(DataLoader(ds, batch_size=3, shuffle=False, collate_fn=collate_fn)))
    data = protocol.DataProto.from_single_dict(batch)
    assert len(data) == 3
    assert data.batch["input_ids"].shape == (3, MAX_LEN)
    assert data.non_tensor_batch["raw_prompt"].shape == (3,)  # each row holds an equal-length (2-message) list
    assert list(data.non_tensor_batch["index"]) == [7, 42, 3]
    assert data.non_tensor_batch["reward_model"][0]["ground_truth"] == "<response> 0 </response>"


# ------------------------------------------------------------------- a `tools` column, rendered by the chat template
TOOLS_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}:{{ t.function.description }};"
    "{% endfor %}</tools>{% endif %}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _tools_parquet(path, tools_cells):
    import json

    import pandas as pd

    rows = _rows(["Weather in Paris?", "Hi"])
    for row, cell in zip(rows, tools_cells):
        row["tools"] = cell if cell is None or isinstance(cell, str) else json.dumps(cell)
    pd.DataFrame(rows).to_parquet(path)  # write_rlla_parquet keeps RLLA's columns only
    return str(path)


def test_a_tools_column_is_rendered_by_the_chat_template(tmp_path, tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TOOLS_TEMPLATE
    path = _tools_parquet(tmp_path / "tools.parquet", [[WEATHER], None])
    ds = RLHFDataset(path, tok, max_prompt_length=96, truncation="error")
    first = tok.decode(ds[0]["input_ids"][ds[0]["attention_mask"].bool()])
    second = tok.decode(ds[1]["input_ids"][ds[1]["attention_mask"].bool()])
    assert first.startswith("<tools>get_weather:Weather of a city.;</tools><|system|>")
    assert second.startswith("<|system|>") and "<tools>" not in second  # a row without tools has none
    assert ds.prompt_lengths()[0] == int(ds[0]["attention_mask"].sum())  # lengths count the rendered tools too


def test_tools_the_template_would_drop_or_cannot_read_are_refused(tmp_path, tokenizer):
    import copy

    path = _tools_parquet(tmp_path / "tools.parquet", [[WEATHER], None])
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"  # no `tools`: they would vanish
    with pytest.raises(ValueError, match=r"tools\.parquet: column 'tools'.*does not|has no `tools`"):
        RLHFDataset(path, plain, max_prompt_length=96)
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TOOLS_TEMPLATE
    bad = _tools_parquet(tmp_path / "bad.parquet", ['[{"name": ', None])
    with pytest.raises(ValueError, match=r"bad\.parquet:0: tools: not JSON"):
        RLHFDataset(bad, tok, max_prompt_length=96)
