"""RLLARewardManager on a DataProto built from real RLLA rows tokenized with the tiny (SmolLM2) tokenizer."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
import torch

from verl.protocol import DataProto
from verl.utils.reward_score.rlla import RewardSwitches, compute_score
from verl.workers.reward_manager import (
    NaiveRewardManager,
    RLLARewardManager,
    get_reward_manager_cls,
    infer_wrapper,
)

N_ROWS = 6
INVALID_GT = "<think> r </think>\n<tool_call>\n{not json}\n</tool_call>"


@pytest.fixture(scope="module")
def rows(shared_dir):
    frame = pd.read_parquet(shared_dir / "data" / "rlla_4k" / "test.parquet")
    # mix tool-call and response-only ground truths
    tool = frame[frame["reward_model"].map(lambda r: "<tool_call>" in r["ground_truth"])].head(N_ROWS - 2)
    resp = frame[frame["reward_model"].map(lambda r: "<tool_call>" not in r["ground_truth"])].head(2)
    return pd.concat([tool, resp]).to_dict("records")


def build_batch(tokenizer, rows, ground_truths=None) -> DataProto:
    """prompts left-padded [B, P], responses = GT + <|im_end|> right-padded [B, R], masks as the rollout makes them."""
    ground_truths = ground_truths or [r["reward_model"]["ground_truth"] for r in rows]
    prompt_ids = [
        tokenizer.encode(
            tokenizer.apply_chat_template(list(r["prompt"]), add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )
        for r in rows
    ]
    response_ids = [
        tokenizer.encode(r["reward_model"]["ground_truth"], add_special_tokens=False)
        + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        for r in rows
    ]
    pad = tokenizer.pad_token_id
    p_len = max(map(len, prompt_ids))
    r_len = max(map(len, response_ids)) + 3  # some right padding on every row
    prompts = torch.full((len(rows), p_len), pad, dtype=torch.long)
    responses = torch.full((len(rows), r_len), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), p_len + r_len), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        prompts[i, p_len - len(p) :] = torch.tensor(p)
        responses[i, : len(r)] = torch.tensor(r)
        mask[i, p_len - len(p) : p_len + len(r)] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": mask,
            "input_ids": torch.cat([prompts, responses], dim=1),
        },
        non_tensors={
            "data_source": [r["data_source"] for r in rows],
            "reward_model": [{"style": "rule", "ground_truth": gt} for gt in ground_truths],
            "extra_info": [dict(r["extra_info"]) for r in rows],
        },
        meta_info={},
    )


@pytest.fixture(scope="module")
def batch(tokenizer, rows):
    return build_batch(tokenizer, rows)


def valid_lengths(batch):
    p_len = batch.batch["prompts"].shape[-1]
    return batch.batch["attention_mask"][:, p_len:].sum(-1)


def test_registry_and_wrapper(tokenizer):
    assert NaiveRewardManager is RLLARewardManager
    assert get_reward_manager_cls("naive") is RLLARewardManager
    with pytest.raises(ValueError, match="registered"):
        get_reward_manager_cls("prime")
    assert infer_wrapper(tokenizer) == "qwen"  # SmolLM2's ChatML template
    assert RLLARewardManager(tokenizer).wrapper == "qwen"
    with pytest.raises(ValueError, match="decode"):
        RLLARewardManager(tokenizer, decode="full")


def test_scores_land_on_last_valid_token_and_components_sum(tokenizer, rows, batch):
    manager = RLLARewardManager(tokenizer, decode="prompt+response", switches=RewardSwitches())
    out = manager(batch, step=0, return_dict=True)
    reward = out["reward_tensor"]
    assert reward.dtype == torch.float32 and reward.shape == batch.batch["responses"].shape
    lengths = valid_lengths(batch)
    for i, row in enumerate(rows):
        gt = row["reward_model"]["ground_truth"]
        expected = compute_score(gt, gt, 0, wrapper="none", switches=RewardSwitches())
        assert reward[i, lengths[i] - 1].item() == pytest.approx(expected[0])
        assert torch.count_nonzero(reward[i]) == 1  # self-scores are >= 1, so exactly one nonzero
        assert out["reward_extra_info"]["format"][i] == expected[1]
        assert out["reward_extra_info"]["correctness"][i] == expected[2]
    assert reward.sum(-1).tolist() == [4.0] * (N_ROWS - 2) + [1.0, 1.0]  # perfect tool / response-only answers
    parts = sum(out[f"token_level_scores_{n}"] for n in ("format", "correctness", "length"))
    assert torch.equal(parts, reward)
    assert out["reward_extra_info"]["reward_valid"] == [True] * N_ROWS
    assert out["reward_invalid_count"] == 0 and out["reward_metrics"]["reward/invalid_frac"] == 0.0
    assert torch.equal(manager(batch, step=0), reward)  # return_dict=False: the tensor alone


def test_decode_modes_agree(tokenizer, batch):
    full = RLLARewardManager(tokenizer, decode="prompt+response", switches=RewardSwitches())(batch, 0, True)
    bare = RLLARewardManager(tokenizer, decode="response", switches=RewardSwitches())(batch, 0, True)
    for key in ("reward_tensor", "token_level_scores_format", "token_level_scores_correctness"):
        assert torch.equal(full[key], bare[key])


def test_decoded_text(tokenizer, rows, batch):
    seen = []

    def spy(data_source, solution_str, ground_truth, extra_info):
        seen.append((solution_str, extra_info))
        return 1.0

    RLLARewardManager(tokenizer, compute_score=spy, decode="prompt+response")(batch, step=7)
    text, info = seen[0]
    assert text.endswith(rows[0]["reward_model"]["ground_truth"] + "<|im_end|>")
    assert "<|im_start|>assistant\n" in text and "<|im_end|><|im_end|>" not in text  # padding excluded
    assert info["step"] == 7 and info["wrapper"] == "qwen" and info["index"] == rows[0]["extra_info"]["index"]
    assert "reward_switches" not in info  # custom scorers get plain extra_info
    seen.clear()
    RLLARewardManager(tokenizer, compute_score=spy, decode="response")(batch, step=7)
    assert seen[0][0] == rows[0]["reward_model"]["ground_truth"]  # special tokens skipped


def test_step_reaches_the_schedules(tokenizer, batch):
    manager = RLLARewardManager(tokenizer, switches=RewardSwitches(schedulereward=True))
    out = manager(batch, step=75, return_dict=True)
    assert out["reward_extra_info"]["format"] == [1.5] * N_ROWS  # 2 − (2 − 1)·75/150
    assert out["reward_extra_info"]["correctness"][:2] == [2.5, 2.5]  # (3 − 2)·75/150 + 2


def test_invalid_ground_truth_becomes_invalid_sample(tokenizer, rows, caplog):
    gts = [r["reward_model"]["ground_truth"] for r in rows]
    gts[1] = INVALID_GT
    data = build_batch(tokenizer, rows, ground_truths=gts)
    manager = RLLARewardManager(tokenizer, switches=RewardSwitches())
    with caplog.at_level(logging.WARNING, logger="verl.workers.reward_manager.naive"):
        out = manager(data, step=3, return_dict=True)
    info = out["reward_extra_info"]
    assert info["reward_valid"] == [True, False] + [True] * (N_ROWS - 2)
    assert "InvalidGroundTruthError" in info["reward_error"][1] and info["reward_error"][0] == ""
    assert out["reward_tensor"][1].abs().sum() == 0
    # the other rows keep their self-scores (responses are still the original ground truths)
    assert out["reward_tensor"].sum(-1).tolist() == [4.0, 0.0] + [4.0] * (N_ROWS - 4) + [1.0, 1.0]
    assert out["reward_invalid_count"] == 1
    assert out["reward_metrics"]["reward/invalid_frac"] == pytest.approx(1 / N_ROWS)
    assert any("row 1" in rec.getMessage() and "InvalidGroundTruthError" in rec.getMessage() for rec in caplog.records)


def test_num_examine_logs_per_data_source(tokenizer, batch, caplog):
    manager = RLLARewardManager(tokenizer, num_examine=2, switches=RewardSwitches())
    with caplog.at_level(logging.INFO, logger="verl.workers.reward_manager.naive"):
        manager(batch)
    samples = [rec for rec in caplog.records if "[reward sample]" in rec.getMessage()]
    assert len(samples) == 2 and "data_source=rlla" in samples[0].getMessage()


def test_missing_keys_are_named(tokenizer, batch):
    data = DataProto.from_dict(
        tensors={k: batch.batch[k] for k in ("prompts", "responses", "attention_mask")},
        non_tensors={"data_source": batch.non_tensor_batch["data_source"]},
    )
    with pytest.raises(KeyError, match="reward_model"):
        RLLARewardManager(tokenizer)(data)


def test_custom_scorer_dict_extra_keys(tokenizer, batch):
    def scorer(data_source, solution_str, ground_truth, extra_info):
        if extra_info["index"] == batch.non_tensor_batch["extra_info"][0]["index"]:
            raise RuntimeError("boom")
        return {"score": 0.5, "acc": True}

    out = RLLARewardManager(tokenizer, compute_score=scorer)(batch, return_dict=True)
    info = out["reward_extra_info"]
    assert info["acc"] == [None] + [True] * (N_ROWS - 1)
    assert info["format"] == [0.0] * N_ROWS
    assert out["reward_tensor"].sum(-1).tolist() == [0.0] + [0.5] * (N_ROWS - 1)
    assert np.asarray(info["reward_valid"]).sum() == N_ROWS - 1


def test_tool_call_metrics_count_the_responses_calls(tokenizer, rows, batch):
    """Responses = the ground truths: 4 rows with tool calls (their calls counted with the parser) and
    2 without; then one response whose <tool_call> block cannot be read."""
    from verl.utils.reward_score.tool_parse import parse_tool_calls

    calls = [len(parse_tool_calls(r["reward_model"]["ground_truth"])) for r in rows]
    assert calls[:4] and all(c >= 1 for c in calls[:4]) and calls[4:] == [0, 0]
    for decode in ("response", "prompt+response"):  # the prompt's tool list never counts
        metrics = RLLARewardManager(tokenizer, decode=decode)(batch, step=0, return_dict=True)["reward_metrics"]
        assert metrics["response/tool_calls/mean"] == pytest.approx(sum(calls) / N_ROWS)
        assert metrics["response/tool_call_rate"] == pytest.approx(4 / N_ROWS)
        assert metrics["response/tool_parse_failure_rate"] == 0.0
    broken = [dict(r, reward_model={"ground_truth": INVALID_GT}) if i == 0 else r for i, r in enumerate(rows)]
    metrics = RLLARewardManager(tokenizer)(build_batch(tokenizer, broken), step=0, return_dict=True)["reward_metrics"]
    assert metrics["response/tool_parse_failure_rate"] == pytest.approx(1 / N_ROWS)
    assert metrics["response/tool_calls/mean"] == pytest.approx((sum(calls) - calls[0]) / N_ROWS)


def test_run_record_names_the_switches_that_are_on(tmp_path):
    """The run's config.yaml records the ToolRL switches read from the environment: a run trained under
    REFINEDREWARD must not read like a default run. Only a value of exactly "1" turns a switch on."""
    from omegaconf import OmegaConf

    from verl.trainer.config_utils import run_record, write_run_record

    config = OmegaConf.create({"trainer": {"total_training_steps": 3}})
    record = run_record(config, {"REFINEDREWARD": "1", "COARSEREWARD": "0", "WITHLENGTH": "true"})
    assert record == {
        "trainer": {"total_training_steps": 3},
        "reward_switches_on": ["REFINEDREWARD"],
        "launch": {"recipe": None, "hardware": None},
    }  # outside a Hydra app: no recipe composed
    assert run_record(config, {})["reward_switches_on"] == []
    # written to the (new) run directory as it is returned
    written = write_run_record(config, str(tmp_path / "run"), {"REFINEDREWARD": "1"})
    assert OmegaConf.to_container(OmegaConf.load(tmp_path / "run" / "config.yaml")) == written == record


@pytest.mark.parametrize("bad", [1e308, -1e308, float("nan"), float("inf"), "high"])
def test_a_reward_not_finite_in_float32_is_an_invalid_sample(tokenizer, batch, bad):
    """A score (or component) that float32 cannot hold — 1e308 is finite in float64 — is one invalid sample, not a
    crash and not a clamped value; the other rows keep their scores."""
    first = batch.non_tensor_batch["extra_info"][0]["index"]

    def scorer(data_source, solution_str, ground_truth, extra_info):
        if extra_info["index"] == first:
            return bad
        return {"score": 0.5, "format": 2e38}  # large but finite in float32: kept

    out = RLLARewardManager(tokenizer, compute_score=scorer)(batch, return_dict=True)
    info = out["reward_extra_info"]
    assert info["reward_valid"] == [False] + [True] * (N_ROWS - 1)
    reason = info["reward_error"][0]
    assert ("not a finite float32 number" in reason and "score=" in reason) if bad != "high" else "high" in reason
    assert out["reward_tensor"].sum(-1).tolist() == [0.0] + [0.5] * (N_ROWS - 1)
    assert out["token_level_scores_format"].sum(-1)[1:].tolist() == pytest.approx([2e38] * (N_ROWS - 1))
    component = {"score": 1.0, "correctness": 1e300}  # a component overflowing float32: invalid too
    out = RLLARewardManager(tokenizer, compute_score=lambda **kw: component)(batch, return_dict=True)
    assert not any(out["reward_extra_info"]["reward_valid"])
    assert "correctness=1e+300" in out["reward_extra_info"]["reward_error"][0]
