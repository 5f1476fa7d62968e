"""RouterController.score on a hand-built batch: router advantages leave out rows the reward could not score."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.router.controller import RouterController
from verl.trainer.config_utils import default_section


def _batch(tokenizer, scores, valid):
    """Four copies of one prompt answering without tools (cost 0), task scores ``scores``."""
    ids = tokenizer("<think> t </think>\n<response> hi </response>", add_special_tokens=False)["input_ids"]
    responses = torch.tensor([ids] * 4)
    token_scores = torch.zeros(4, len(ids))
    token_scores[:, -1] = torch.tensor(scores)
    families = np.empty(4, dtype=object)
    families[:] = [{}] * 4
    return DataProto.from_dict(
        {
            "responses": responses,
            "response_mask": torch.ones_like(responses),
            "token_level_scores": token_scores,
            "router_action": torch.zeros(4, dtype=torch.long),
            "router_logits": torch.zeros(4, 3),
        },
        non_tensors={
            "uid": np.array(["p"] * 4, dtype=object),
            "tool_families": families,
            "reward_valid": np.array(valid),
        },
    )


def test_invalid_rows_get_no_router_advantage_and_stay_out_of_the_group(tokenizer):
    controller = RouterController(default_section("router"), default_section("data", max_prompt_length=64), tokenizer)
    batch = _batch(tokenizer, [1.0, 3.0, 0.0, 2.0], [True, True, False, True])
    metrics = controller.score(batch, step=1)
    adv = batch.batch["router_advantages"]
    # valid rows 1, 3, 2 (no cost, lambda 0): mean 2, unbiased std 1 -> -1, +1, 0; the invalid row 0
    torch.testing.assert_close(adv, torch.tensor([-1.0, 1.0, 0.0, 0.0]), atol=1e-5, rtol=0)
    assert metrics["router/mean_task_reward"] == pytest.approx(2.0)  # the placeholder 0 is not a task reward
    assert metrics["router/route_entropy"] == pytest.approx(np.log(3), rel=1e-6)  # uniform logits at routing time
    assert "router/entropy" not in metrics  # that name belongs to the router update's own metric


def test_a_tools_column_is_refused_by_the_router(tokenizer):
    """The route's rewrite edits the system prompt's tools block; tools given to the chat template would be lost."""
    controller = RouterController(default_section("router"), default_section("data", max_prompt_length=64), tokenizer)
    raw, tools = np.empty(2, dtype=object), np.empty(2, dtype=object)
    raw[:] = [[{"role": "user", "content": "hi"}]] * 2
    tools[:] = ['[{"name": "x"}]'] * 2
    batch = DataProto.from_dict(
        {"input_ids": torch.ones(2, 3, dtype=torch.long)}, non_tensors={"raw_prompt": raw, "tools": tools}
    )
    with pytest.raises(ValueError, match="'tools' column"):
        controller.route(batch, torch.zeros(2, 3), validate=True)


def test_mixed_cost_groups_frac_counts_the_groups_where_lambda_can_act(tokenizer):
    """Group "a": two of four copies call a tool (its cost varies); group "b": every copy calls one (its cost is the
    same for all, so r_task - lambda * cost moves the whole group and no group-normalised advantage changes)."""
    plain = tokenizer("<think> t </think>\n<response> hi </response>", add_special_tokens=False)["input_ids"]
    call = tokenizer(
        '<think> t </think>\n<tool_call>\n{"name": "x", "parameters": {}}\n</tool_call>', add_special_tokens=False
    )["input_ids"]
    rows = [call, call, plain, plain] + [call] * 4
    width = max(map(len, rows))
    responses = torch.tensor([r + [tokenizer.eos_token_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    scores = torch.zeros(8, width)
    families = np.empty(8, dtype=object)
    families[:] = [{}] * 8
    batch = DataProto.from_dict(
        {
            "responses": responses,
            "response_mask": mask,
            "token_level_scores": scores,
            "router_action": torch.zeros(8, dtype=torch.long),
            "router_logits": torch.zeros(8, 3),
        },
        non_tensors={"uid": np.array(["a"] * 4 + ["b"] * 4, dtype=object), "tool_families": families},
    )
    cfg = default_section("router", lambda_init=2.0)
    metrics = RouterController(cfg, default_section("data", max_prompt_length=64), tokenizer).score(batch, step=1)
    assert batch.batch["router_cost"].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert metrics["router/mixed_cost_groups_frac"] == pytest.approx(0.5)
    adv = batch.batch["router_advantages"]
    assert torch.all(adv[4:] == 0)  # equal task scores and equal costs: lambda gives group "b" no signal
    assert adv[0] < 0 < adv[2]  # in group "a" the copies that paid are worse off
    # one copy per prompt (n = 1, greedy validation): no group, no metric
    singles = batch.select(batch_keys=list(batch.batch.keys()), non_tensor_batch_keys=["tool_families"])
    singles.non_tensor_batch["uid"] = np.array([str(i) for i in range(8)], dtype=object)
    assert "router/mixed_cost_groups_frac" not in RouterController(
        cfg, default_section("data", max_prompt_length=64), tokenizer
    ).score(singles, step=1)
