"""Async-RL core: Turn / Rollout / RlExample types (docs/async.md, "Data types")."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

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
        scores=torch.zeros(b, length),
        policy_logprobs=torch.zeros(b, length),
    )
    fields.update(override)
    return RlExample(**fields)


def test_rl_example_validation():
    ex = _example()
    assert (ex.batch_size, ex.seq_len, ex.num_tokens) == (2, 4, 8)
    with pytest.raises(ValueError, match="shape"):
        _example(scores=torch.zeros(2, 5))
    with pytest.raises(TypeError, match="int32"):
        _example(input_ids=torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\[batch, position\]"):
        _example(policy_logprobs=torch.zeros(8))
    with pytest.raises(ValueError, match="padding"):
        _example(segment_ids=torch.zeros(2, 4, dtype=torch.int32), loss_mask=torch.ones(2, 4, dtype=torch.bool))
