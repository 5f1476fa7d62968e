"""Async-RL core: Turn / Rollout / RlExample types and the group advantage functions (specs/async_rl.md)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from verl.async_rl.advantage import RLOO, GRPOZScore, get_advantage_function
from verl.async_rl.types import RlExample, Rollout, Turn


# ------------------------------------------------------------------------------------------------------ types
def test_turn_is_frozen_slotted_and_validates():
    turn = Turn("hi", "assistant", [5, 6], [-0.1, -0.2], reward=1)
    assert turn.tokens == (5, 6) and turn.logprobs == (-0.1, -0.2) and turn.reward == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.role = "user"
    assert not hasattr(turn, "__dict__")  # slots
    with pytest.raises(ValueError, match="2 tokens but 1 logprobs"):
        Turn("hi", "assistant", [5, 6], [-0.1])
    with pytest.raises(ValueError):
        Turn("hi", "assistant", [5], [float("nan")])
    with pytest.raises(TypeError):
        Turn("hi", "user", ["a"])


def test_rollout_helpers(make_rollout):
    r = make_rollout(prompt=4, gen=3, tool=5, reward=1.0, version=7, truncated=True, rewards={"format": 0.5})
    assert [t.role for t in r] == ["user", "assistant", "tool", "assistant"]  # iterable over turns
    assert r.num_tokens == 4 + 3 + 5 + 3 and r.num_generated_tokens == 6
    assert r.policy_version == 7 and r.truncated and r.rewards == {"format": 0.5}
    # reward = sum of the non-None turn rewards
    turns = (
        Turn("q", "user", (1,), reward=None),
        Turn("a", "assistant", (2,), (-0.1,), reward=1.0),
        Turn("t", "tool", (3,), reward=-0.25),
    )
    assert Rollout("e", "p", "u", turns, {"policy_version": 0}).reward == pytest.approx(0.75)
    assert Rollout("e", "p", "u", turns[:1], {"policy_version": 0}).reward == 0.0
    for bad in ({}, {"policy_version": "3"}, {"policy_version": True}):
        with pytest.raises(ValueError, match="policy_version"):
            Rollout("e", "p", "u", turns, bad).policy_version
    assert not Rollout("e", "p", "u", turns, {"policy_version": 0}).truncated


def test_rollout_json_round_trip(make_rollout):
    r = make_rollout(tool=2, reward=0.5, rewards={"acc": 1.0})
    text = r.to_json()
    assert "\n" not in text and json.loads(text)["rollout_uid"] == r.rollout_uid
    back = Rollout.from_json(text)
    assert back == r
    assert isinstance(back.turns, tuple) and isinstance(back.turns[1].logprobs, tuple)


def _example(b=2, length=4, **override):
    fields = dict(
        input_ids=torch.zeros(b, length, dtype=torch.int32),
        loss_mask=torch.zeros(b, length, dtype=torch.bool),
        segment_ids=torch.ones(b, length, dtype=torch.int32),
        position_ids=torch.zeros(b, length, dtype=torch.int32),
        advantages=torch.zeros(b, length),
        policy_logprobs=torch.zeros(b, length),
    )
    fields.update(override)
    return RlExample(**fields)


def test_rl_example_validation():
    ex = _example()
    assert (ex.batch_size, ex.seq_len, ex.num_tokens, ex.reference_logprobs) == (2, 4, 8, None)
    with pytest.raises(ValueError, match="shape"):
        _example(advantages=torch.zeros(2, 5))
    with pytest.raises(TypeError, match="int32"):
        _example(input_ids=torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\[batch, position\]"):
        _example(policy_logprobs=torch.zeros(8))
    with pytest.raises(ValueError, match="padding"):
        _example(segment_ids=torch.zeros(2, 4, dtype=torch.int32), loss_mask=torch.ones(2, 4, dtype=torch.bool))
    assert _example(reference_logprobs=torch.zeros(2, 4)).reference_logprobs.shape == (2, 4)


# ------------------------------------------------------------------------------------------------- advantages
def test_rloo_hand_worked(make_rollout):
    group = [make_rollout(reward=r) for r in (1.0, 0.0, 0.0, 1.0)]
    # A_i = r_i - (sum - r_i) / (n - 1): 1 - 1/3 = 2/3; 0 - 2/3 = -2/3
    assert RLOO()(group) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert RLOO()(group[:1]) == [0.0]  # n = 1 -> 0 (spec), not the raw reward
    assert RLOO().from_rewards([3.0, 1.0, 2.0]) == pytest.approx([3 - 1.5, 1 - 2.5, 2 - 2.0])
    with pytest.raises(ValueError, match="empty"):
        RLOO()([])


def test_grpo_zscore_hand_worked(make_rollout):
    group = [make_rollout(reward=r) for r in (1.0, 0.0, 0.0, 1.0)]
    # mean 0.5, unbiased std sqrt(1/3), epsilon added to the std (core_algos.group_normalize's convention)
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert GRPOZScore()(group) == pytest.approx([expected, -expected, -expected, expected], abs=1e-12)
    assert GRPOZScore().from_rewards([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
    assert GRPOZScore().from_rewards([5.0]) == [0.0]
    assert GRPOZScore(singleton_zero=False).from_rewards([5.0]) == pytest.approx([5.0 / (1 + 1e-6)])
    assert GRPOZScore(norm_by_std=False).from_rewards([1.0, 0.0]) == pytest.approx([0.5, -0.5])


def test_advantage_registry():
    assert isinstance(get_advantage_function("rloo"), RLOO)
    grpo = get_advantage_function("grpo", epsilon=0.1)
    assert isinstance(grpo, GRPOZScore) and grpo.epsilon == 0.1
    with pytest.raises(ValueError, match="known"):
        get_advantage_function("gae")
