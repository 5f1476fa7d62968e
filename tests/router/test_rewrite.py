"""Route-conditioned prompt rewrite on real RLLA rows, and re-tokenisation identical to the dataset's."""

import copy

import pandas as pd
import pytest
import torch

from verl.router import RouterAction, ToolFamily
from verl.router.families import block_families, effective_route, parse_tools_block
from verl.router.rewrite import (
    ANSWER_INSTRUCTION,
    ROUTING_HEADER,
    rewrite_batch,
    rewrite_messages,
    rewrite_system_text,
    tokenize_prompts,
)
from verl.utils.dataset.rl_dataset import PromptTooLongError, RLHFDataset

A = RouterAction


@pytest.fixture(scope="module")
def test_file(shared_dir):
    return shared_dir / "data" / "rlla_4k" / "test.parquet"


@pytest.fixture(scope="module")
def rows(test_file):
    return pd.read_parquet(test_file)


def _prompt(rows, i):
    return list(rows.iloc[i]["prompt"])  # numpy object array of dicts, as RLHFDataset sees it


def test_answer_route_removes_tools_block_on_every_row(rows):
    for i in range(len(rows)):
        prompt = _prompt(rows, i)
        original = prompt[0]["content"]
        out = rewrite_messages(prompt, A.ANSWER)
        system = out[0]["content"]
        assert "**Available Tools**" not in system and "Name: " not in system and "Parameters: {" not in system
        assert system.endswith(ANSWER_INSTRUCTION)
        block = parse_tools_block(original)
        # exactly the block is removed; the rest of the original text is kept in order
        assert (
            system
            == (original[: block.start] + original[block.end :].lstrip("\n")).rstrip() + "\n\n" + ANSWER_INSTRUCTION
        )
        assert out[1] == dict(prompt[1])


@pytest.mark.parametrize("action", [A.SEARCH, A.CALCULATE])
def test_filter_tools_keeps_only_the_family(rows, action):
    for i in range(len(rows)):
        prompt = _prompt(rows, i)
        block = parse_tools_block(prompt[0]["content"])
        fam = block_families(block)
        wanted = [t.name for t in block.tools if effective_route(fam[t.name]) == action]
        system = rewrite_messages(prompt, action, filter_tools=True)[0]["content"]
        new_block = parse_tools_block(system)
        if not wanted:  # nothing of that family: no tools left -> answer directly
            assert new_block is None and system.endswith(ANSWER_INSTRUCTION)
            continue
        assert new_block.names == wanted
        assert [t.number for t in new_block.tools] == list(range(1, len(wanted) + 1))
        assert system.rstrip().split(ROUTING_HEADER)[-1].count(wanted[0]) == 1  # preferred tools named
        # each kept entry is the original entry verbatim
        originals = {t.name: t.text for t in block.tools}
        assert all(t.text == originals[t.name] for t in new_block.tools)


def test_no_filter_keeps_all_tools_family_first(rows):
    prompt = _prompt(rows, 6)  # reverse_words, find_max_subarray_sum, find_files, fibonacci
    block = parse_tools_block(prompt[0]["content"])
    fam = block_families(block)
    assert [fam[n] for n in block.names] == [
        ToolFamily.CALCULATE,
        ToolFamily.CALCULATE,
        ToolFamily.OTHER,
        ToolFamily.CALCULATE,
    ]
    system = rewrite_messages(prompt, A.SEARCH, filter_tools=False)[0]["content"]
    assert parse_tools_block(system).names == ["find_files", "reverse_words", "find_max_subarray_sum", "fibonacci"]
    assert "Prefer the search and retrieval tools (find_files)" in system
    system = rewrite_messages(prompt, A.CALCULATE, filter_tools=False)[0]["content"]
    assert parse_tools_block(system).names == ["reverse_words", "find_max_subarray_sum", "fibonacci", "find_files"]
    only_calc = rewrite_messages(prompt, A.CALCULATE, filter_tools=True)[0]["content"]
    assert parse_tools_block(only_calc).names == ["reverse_words", "find_max_subarray_sum", "fibonacci"]


def test_single_family_row_keeps_block_text_identical(rows):
    prompt = _prompt(rows, 0)  # four search tools
    original = prompt[0]["content"]
    for filter_tools in (False, True):
        system = rewrite_messages(prompt, A.SEARCH, filter_tools=filter_tools)[0]["content"]
        assert system.startswith(original.rstrip())
        assert system[len(original.rstrip()) :].startswith("\n\n" + ROUTING_HEADER)


def test_family_overrides_and_empty_family_without_filter(rows):
    prompt = _prompt(rows, 0)
    overrides = {"GetNews": ToolFamily.CALCULATE}
    system = rewrite_messages(prompt, A.CALCULATE, families=overrides, filter_tools=True)[0]["content"]
    assert parse_tools_block(system).names == ["GetNews"]
    system = rewrite_messages(prompt, A.CALCULATE, filter_tools=False)[0]["content"]
    assert parse_tools_block(system).names == parse_tools_block(prompt[0]["content"]).names
    assert "none of the listed tools" in system


def test_rewrite_is_deterministic_and_does_not_mutate(rows):
    raw = rows.iloc[9]["prompt"]
    snapshot = copy.deepcopy([dict(m) for m in raw])
    for action in A:
        for filter_tools in (False, True):
            first = rewrite_messages(raw, action, filter_tools=filter_tools)
            second = rewrite_messages(copy.deepcopy(raw), action, filter_tools=filter_tools)
            assert first == second
            first[0]["content"] = "changed"  # the result is a fresh copy
    assert [dict(m) for m in raw] == snapshot


def test_no_system_message_and_bad_action():
    out = rewrite_messages([{"role": "user", "content": "2+2?"}], A.ANSWER)
    assert out == [{"role": "system", "content": ANSWER_INSTRUCTION}, {"role": "user", "content": "2+2?"}]
    with pytest.raises(ValueError, match="router action"):
        rewrite_system_text("x", 3)


def test_rewrite_batch(rows):
    prompts = [_prompt(rows, i) for i in range(3)]
    out = rewrite_batch(prompts, torch.tensor([0, 1, 2]))
    assert out[0] == rewrite_messages(prompts[0], A.ANSWER)
    assert out[2] == rewrite_messages(prompts[2], A.CALCULATE)
    with pytest.raises(ValueError, match="3 prompts, 2 actions"):
        rewrite_batch(prompts, [0, 1])


def test_tokenize_matches_dataset_encoding(test_file, rows, tokenizer):
    length = 2048
    dataset = RLHFDataset([str(test_file)], tokenizer, max_prompt_length=length, truncation="left")
    prompts = [_prompt(rows, i) for i in range(3)]
    enc = tokenize_prompts(tokenizer, prompts, length, truncation="left")
    for i in range(3):
        item = dataset[i]
        for key in ("input_ids", "attention_mask", "position_ids"):
            assert torch.equal(enc[key][i], item[key]), key
    rewritten = tokenize_prompts(tokenizer, rewrite_batch(prompts, [0, 0, 0]), length, truncation="left")
    assert (rewritten["attention_mask"].sum(-1) < enc["attention_mask"].sum(-1)).all()  # tools block removed
    assert (rewritten["attention_mask"][:, -1] == 1).all()  # left padding
    text = tokenizer.decode(rewritten["input_ids"][0][rewritten["attention_mask"][0].bool()])
    assert "Do NOT use `<tool_call>`" in text and text.endswith("<|im_start|>assistant\n")


def test_tokenize_truncation(rows, tokenizer):
    prompts = [_prompt(rows, 0), _prompt(rows, 1)]
    with pytest.raises(PromptTooLongError, match=r"batch row 0: \d+ tokens exceed max_prompt_length=64"):
        tokenize_prompts(tokenizer, prompts, 64, truncation="error")
    enc = tokenize_prompts(tokenizer, prompts, 64, truncation="left")
    assert enc["input_ids"].shape == (2, 64) and enc["attention_mask"].all()
    assert enc["position_ids"][0].tolist() == list(range(64))
