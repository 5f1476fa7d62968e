"""SFTDataset, its collate function, the epoch planner and the LR schedule (tokenizer only, no model)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from verl.trainer.fsdp_sft_trainer import build_lr_lambda, plan_epoch
from verl.utils.dataset.sft_dataset import SFTDataset, sft_collate_fn


@pytest.fixture(scope="module")
def test_parquet(shared_dir):
    return str(shared_dir / "data" / "rlla_4k" / "test.parquet")


@pytest.fixture(scope="module")
def rows(test_parquet):
    return pd.read_parquet(test_parquet).head(6).to_dict(orient="records")


def _prompt_ids(tokenizer, row):
    text = tokenizer.apply_chat_template(list(row["prompt"]), tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_loss_mask_covers_exactly_response_and_eos(tokenizer, test_parquet, rows):
    ds = SFTDataset(test_parquet, tokenizer, {"max_length": 4096, "max_samples": 6})
    assert len(ds) == 6
    for i, row in enumerate(rows):
        item = ds[i]
        ids, mask = item["input_ids"], item["loss_mask"]
        prompt_ids = _prompt_ids(tokenizer, row)
        response_ids = tokenizer(row["reward_model"]["ground_truth"], add_special_tokens=False)["input_ids"]
        assert ids.tolist() == prompt_ids + response_ids + [tokenizer.eos_token_id]
        assert mask.tolist() == [0] * len(prompt_ids) + [1] * (len(response_ids) + 1)
        assert tokenizer.decode(ids[mask.bool()]) == row["reward_model"]["ground_truth"] + "<|im_end|>"
        assert tokenizer.decode(ids[~mask.bool()]).endswith("<|im_start|>assistant\n")
        assert item["attention_mask"].tolist() == [1] * len(ids)
        assert item["position_ids"].tolist() == list(range(len(ids)))
        assert ds.response_lengths[i] == len(response_ids) + 1 and ds.lengths[i] == len(ids)


def test_left_truncation_drops_the_start_of_the_prompt(tokenizer, test_parquet, rows):
    ds = SFTDataset(test_parquet, tokenizer, {"max_length": 200, "max_samples": 3})
    for i, row in enumerate(rows[:3]):
        item = ds[i]
        prompt_ids = _prompt_ids(tokenizer, row)
        response_ids = tokenizer(row["reward_model"]["ground_truth"], add_special_tokens=False)["input_ids"]
        n_resp = len(response_ids) + 1
        assert len(item["input_ids"]) == 200
        assert item["input_ids"][-n_resp:].tolist() == response_ids + [tokenizer.eos_token_id]
        assert item["input_ids"][:-n_resp].tolist() == prompt_ids[-(200 - n_resp) :]
        assert int(item["loss_mask"].sum()) == n_resp


def test_truncation_error_names_file_and_row(tokenizer, test_parquet):
    with pytest.raises(ValueError, match=r"test\.parquet row 0: .* exceed max_length=64"):
        SFTDataset(test_parquet, tokenizer, {"max_length": 64, "truncation": "error"})


def test_missing_response_key_names_file_row_and_key(tokenizer, test_parquet):
    with pytest.raises(KeyError, match=r"test\.parquet row 0: key 'reward_model\.answer' not found"):
        SFTDataset(test_parquet, tokenizer, {"response_key": "reward_model.answer"})


def test_string_prompt_and_bad_prompt(tokenizer, tmp_path):
    good = tmp_path / "good.parquet"
    pd.DataFrame({"question": ["What is 2+2?"], "answer": ["4"]}).to_parquet(good)
    ds = SFTDataset(str(good), tokenizer, {"prompt_key": "question", "response_key": "answer"})
    assert tokenizer.decode(ds[0]["input_ids"]).endswith(
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>"
    )
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"question": [[{"text": "hi"}]], "answer": ["4"]}).to_parquet(bad)
    with pytest.raises(ValueError, match=r"bad\.parquet row 0: prompt message 0"):
        SFTDataset(str(bad), tokenizer, {"prompt_key": "question", "response_key": "answer"})


def test_collate_left_pads():
    items = [
        {
            "input_ids": torch.tensor([5, 6, 7]),
            "attention_mask": torch.ones(3, dtype=torch.long),
            "position_ids": torch.arange(3),
            "loss_mask": torch.tensor([0, 1, 1]),
        },
        {
            "input_ids": torch.tensor([8]),
            "attention_mask": torch.ones(1, dtype=torch.long),
            "position_ids": torch.arange(1),
            "loss_mask": torch.tensor([1]),
        },
    ]
    out = sft_collate_fn(items, pad_token_id=2)
    assert out["input_ids"].tolist() == [[5, 6, 7], [2, 2, 8]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert out["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0]]
    assert out["loss_mask"].tolist() == [[0, 1, 1], [0, 0, 1]]


def test_plan_epoch_batches_sorted_and_disjoint():
    lengths = [10, 50, 30, 20, 60, 40, 70, 80, 90, 15]
    plan = plan_epoch(lengths, train_batch_size=4, micro_batch_size=2, seed=1, epoch=0)
    assert len(plan) == 2  # 10 rows // 4, tail dropped
    flat = [i for step in plan for mb in step for i in mb]
    assert len(flat) == len(set(flat)) == 8
    for step in plan:
        order = [i for mb in step for i in mb]
        assert [lengths[i] for i in order] == sorted((lengths[i] for i in order), reverse=True)
        assert [len(mb) for mb in step] == [2, 2]
    assert plan == plan_epoch(lengths, 4, 2, seed=1, epoch=0)
    assert plan != plan_epoch(lengths, 4, 2, seed=1, epoch=1)
    ranks = [plan_epoch(lengths, 4, 1, seed=1, epoch=0, rank=r, world_size=2) for r in range(2)]
    for s, step in enumerate(plan):
        per_rank = [sorted(i for mb in ranks[r][s] for i in mb) for r in range(2)]
        assert all(len(p) == 2 for p in per_rank)
        assert sorted(per_rank[0] + per_rank[1]) == sorted(i for mb in step for i in mb)
    with pytest.raises(ValueError, match="train_batch_size=16 exceeds the 10"):
        plan_epoch(lengths, 16, 2, seed=1, epoch=0)


def test_lr_lambda_warmup_then_cosine_or_constant():
    cos = build_lr_lambda(total_steps=10, warmup_steps=2, style="cosine", min_lr_ratio=0.1)
    assert cos(0) == pytest.approx(0.5) and cos(1) == pytest.approx(1.0) and cos(2) == pytest.approx(1.0)
    assert cos(6) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert cos(10) == pytest.approx(0.1)
    const = build_lr_lambda(total_steps=10, warmup_steps=0, style="constant")
    assert const(0) == const(9) == 1.0
    with pytest.raises(ValueError, match="optim.lr_scheduler"):
        build_lr_lambda(10, 0, "linear")
