"""``rlla_multiturn`` on real RLLA rows: turn 0 is ToolRL's reward, recorded observations answer repeated calls."""

from __future__ import annotations

import json

import pytest

from agent_system.environments.base import make_env
from agent_system.environments.rlla_multiturn import _rows, recorded_observations
from verl.utils.reward_score.rlla import compute_score


def _row_with_obs():
    rows = _rows("train", None)
    for seed, row in enumerate(rows):
        if "<obs>" in row["user"] and recorded_observations(row["user"]):
            return seed, row
    pytest.skip("no training row with a recorded observation")


def test_turn_zero_is_the_rlla_reward_and_the_ground_truth_wins():
    env = make_env("rlla_multiturn")
    first = env.reset(3)
    row = _rows("train", None)[3]
    assert first.text == row["user"] and first.info["instruction"] == row["system"]
    result = env.step(row["ground_truth"])
    expected = compute_score(row["ground_truth"], row["ground_truth"], wrapper="none")
    assert result.reward == pytest.approx(expected[0]) and result.info["won"]
    wrong = env.reset(3)
    assert wrong.anchor == first.anchor  # same task, same turn, same observation: one GiGPO anchor
    bad = env.step("no tags at all")
    assert bad.done and not bad.info["is_action_valid"] and not bad.info["won"]
    assert bad.reward == pytest.approx(compute_score("no tags at all", row["ground_truth"], wrapper="none")[0])


def test_tool_calls_get_recorded_or_unavailable_observations_then_a_response_ends():
    seed, row = _row_with_obs()
    env = make_env("rlla_multiturn")
    env.reset(seed)
    key, obs = next(iter(recorded_observations(row["user"]).items()))
    call = json.loads(key)
    out = env.step(f"<think> look it up </think>\n<tool_call>\n{json.dumps(call)}\n</tool_call>")
    assert not out.done and out.info["is_action_valid"] and obs in out.text
    out = env.step('<think> again </think>\n<tool_call>\n{"name": "NoSuchTool", "parameters": {}}\n</tool_call>')
    assert not out.done and out.reward == 0.0 and "tool unavailable" in out.text and "NoSuchTool" in out.text
    end = env.step("<think> done </think>\n<response> here you go </response>")
    assert end.done and end.reward == 0.0 and end.info["is_action_valid"]


def test_validation_split_and_bad_split():
    env = make_env("rlla_multiturn", split="test")
    assert env.reset(0).text == _rows("test", None)[0]["user"]
    with pytest.raises(ValueError, match="split"):
        make_env("rlla_multiturn", split="dev")
