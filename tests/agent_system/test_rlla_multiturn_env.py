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


def test_scheduled_rewards_advance_with_the_trainers_step(monkeypatch):
    """SCHEDULEREWARD moves the format and correctness ranges with the step: the manager hands the trainer's step to
    every instance, and the same answer scores as ToolRL's reward does at that step (and still wins)."""
    from agent_system.environments.manager import EnvironmentManager

    monkeypatch.setenv("SCHEDULEREWARD", "1")
    seed, row = next((i, r) for i, r in enumerate(_rows("train", None)) if '"name": "' in r["ground_truth"])
    truth = row["ground_truth"]
    start = truth.index('"name": "') + len('"name": "')
    wrong_tool = truth[:start] + "no_such_tool_" + truth[start:]  # well formed, partly correct
    envs = EnvironmentManager("rlla_multiturn", {}, num_tasks=1, group_n=1, use_ray=False)
    scores = {}
    for step in (0, 150):
        for answer, wins in ((truth, True), (wrong_tool, False)):
            envs.reset([seed], step=step)
            _, rewards, _, infos = envs.step([answer])
            scores[step, wins] = float(rewards[0])
            assert scores[step, wins] == pytest.approx(compute_score(answer, truth, step, "none")[0])
            assert infos[0]["won"] is wins  # the ground truth wins at every step of the schedule
    # the schedule keeps the best total (2 + 2 at step 0, 1 + 3 at 150) and moves a partial answer's
    assert scores[0, True] == scores[150, True] and scores[0, False] != scores[150, False]
    envs.close()


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
