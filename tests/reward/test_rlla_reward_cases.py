"""Hand-worked RLLA reward values from ../shared/specs/rlla_reward.md (§1 worked values, greedy matching, rounding,
switch schedules)."""

from __future__ import annotations

import json

import pytest

from verl.utils.reward_score.rlla import (
    RewardSwitches,
    compute_score,
    compute_tool_call_reward,
    correctness_range,
    format_range,
    length_reward,
    match_score,
)

DEFAULT = RewardSwitches()


def tool_answer(*calls: dict, think: str = "reasoning") -> str:
    body = "\n".join(json.dumps(c) for c in calls)
    return f"<think>{think}</think>\n<tool_call>\n{body}\n</tool_call>"


def correctness(gt_calls, pd_calls, switches=DEFAULT):
    return compute_score(tool_answer(*pd_calls), tool_answer(*gt_calls), 0, wrapper="none", switches=switches)[2]


GT_ONE = {"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}


@pytest.mark.parametrize(
    "pred, expected",
    [
        # M = 1 + (1 + 2) = 4; correctness = 6·S/4 − 3
        ([{"name": "get_weather", "parameters": {"city": "Paris", "days": 4}}], 1.5),  # S = 1 + 1 + 1
        ([{"name": "get_weather", "parameters": {"city": "Paris"}}], 0.75),  # S = 1 + 1/2 + 1
        ([{"name": "get_weather", "parameters": {"city": "Paris", "days": 3, "unit": "C"}}], 2.5),  # S = 1 + 2/3 + 2
        ([GT_ONE, {"name": "get_time", "parameters": {}}], 2.25),  # S = 1/2 + 1 + 2
        ([{"name": "get_forecast", "parameters": {"city": "Paris", "days": 3}}], -3.0),  # S = 0
        ([GT_ONE], 3.0),
        ([{"name": "get_weather", "parameters": {"days": 3, "city": "Paris"}}], 3.0),  # key order is irrelevant
        ([{"name": "get_weather", "parameters": {"city": "Paris", "days": 3.0}}], 3.0),  # 3 == 3.0
        ([{"name": "get_weather", "parameters": {"city": "Paris", "days": "3"}}], 1.5),  # "3" != 3
    ],
)
def test_worked_values_one_tool_two_parameters(pred, expected):
    assert correctness([GT_ONE], pred) == pytest.approx(expected, abs=1e-12)
    score, fmt, corr, length = compute_score(tool_answer(*pred), tool_answer(GT_ONE), 0, "none", switches=DEFAULT)
    assert (fmt, length) == (1.0, 0.0) and score == pytest.approx(fmt + corr + length)


def test_greedy_matching_is_not_optimal():
    """GT f(a=1,b=2), f(a=1,b=3); pred f(a=1,b=3), f(a=1). M = 7, names S = 1.
    Greedy: GT1 takes pred1 (1 + 1 = 2 > 1/2 + 1), GT2 gets pred2 (1.5): S = 4.5 → 6·4.5/7 − 3 = 0.857.
    The optimal assignment (GT1–pred2 1.5, GT2–pred1 3) would give S = 5.5 → 1.714."""
    gt = [{"name": "f", "parameters": {"a": 1, "b": 2}}, {"name": "f", "parameters": {"a": 1, "b": 3}}]
    pred = [{"name": "f", "parameters": {"a": 1, "b": 3}}, {"name": "f", "parameters": {"a": 1}}]
    assert correctness(gt, pred) == pytest.approx(6 * 4.5 / 7 - 3, abs=1e-12)
    assert round(correctness(gt, pred), 3) == 0.857
    assert round(6 * 5.5 / 7 - 3, 3) == 1.714  # what an optimal matching would have given


def test_tool_order_matters_only_outside_exact_match():
    a, b = {"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {"y": 2}}
    assert correctness([a, b], [a, b]) == 3.0
    # swapped: not equal as lists, names Jaccard 1, each tool matched fully: S = 1 + 2 + 2 = M - 0 → max
    assert correctness([a, b], [b, a]) == pytest.approx(3.0)
    assert correctness([a, b], [b, a], RewardSwitches(coarsereward=True)) == -3.0
    # REFINEDREWARD: names lists differ in order → 0 for the names term: S = 0 + 2 + 2 = 4, M = 5
    assert correctness([a, b], [b, a], RewardSwitches(refinedreward=True)) == pytest.approx(6 * 4 / 5 - 3)


def test_match_score():
    assert match_score(["a", "b"], ["a", "b"]) == 1.0
    assert match_score([], []) == 1.0
    assert match_score(["a"], []) == 0.0
    assert match_score(["a", "a", "b"], ["a", "c"]) == pytest.approx(1 / 4)  # multiset: ∩ = 1, |A|+|B|−∩ = 4
    assert match_score(["a", "b"], ["b", "a"]) == pytest.approx(1.0)
    assert match_score(["a", "b"], ["b", "a"], refined=True) == 0.0
    with pytest.raises(TypeError):
        match_score([["unhashable"]], [["other"]])


def test_intermediate_reward_ignores_predicted_parameters():
    gt = [GT_ONE]
    arguments_style = [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]
    sw = RewardSwitches(intermediatereward=True)
    # M = 1 + 1; names term 1; no predicted tool equals the GT dict → S = 1 → 6·1/2 − 3 = 0
    assert correctness(gt, arguments_style, sw) == pytest.approx(0.0)
    assert correctness(gt, arguments_style) == -3.0  # default reads pd["parameters"] → KeyError → minimum
    assert compute_tool_call_reward(gt, [GT_ONE, GT_ONE], 3.0, -3.0, sw) == pytest.approx(6 * (0.5 + 1) / 2 - 3)


def test_length_rounding_uses_exact_binary_value():
    def pred(words):
        return "<think>" + " ".join(["w"] * words) + "</think>\n<response>ok</response>"

    assert length_reward(pred(64), 0, DEFAULT) == 0.12  # 0.125 is stored as exactly 0.125 → banker's → 0.12
    assert length_reward(pred(320), 0, DEFAULT) == 0.62  # 0.625 → 0.62
    assert length_reward(pred(600), 0, DEFAULT) == 1.0
    assert length_reward("no think here", 0, DEFAULT) == 0.0
    sched = RewardSwitches(withlength=True, schedulelength=True)
    assert length_reward(pred(448), 105, sched) == 0.7  # L = 384 + 256 = 640
    assert length_reward(pred(448), 210, sched) == 0.5  # L = 896, uncapped
    score = compute_score(
        pred(64), "<think>x</think>\n<response>y</response>", 0, "none", switches=RewardSwitches(withlength=True)
    )
    assert score == (1.0 + 0.0 + 0.12, 1.0, 0.0, 0.12)


def test_schedules():
    assert format_range(0, DEFAULT) == (1.0, 0.0)
    assert correctness_range(0, RewardSwitches(correctmax1=True)) == (1.0, -1.0)
    m = RewardSwitches(max1step30max3=True)
    assert format_range(29, m) == (1.0, 0.0) and format_range(30, m) == (0.5, 0.0)
    assert correctness_range(29, m) == pytest.approx((1.0, -1.0)) and correctness_range(30, m) == (3.0, -3.0)
    s = RewardSwitches(schedulereward=True)
    assert format_range(0, s) == (2.0, -2.0)
    assert format_range(300, s) == (1.0, -1.0)  # failed format stays ≤ −1 forever
    assert correctness_range(0, s) == (2.0, -2.0)
    assert correctness_range(75, s) == (2.5, -2.5)
    assert correctness_range(300, s) == (3.0, -3.0)  # capped
    assert correctness_range(75, RewardSwitches(schedulereward=True, correctmax1=True)) == (1.5, -1.5)


def test_format_and_prediction_extraction_quirks():
    gt_call = tool_answer(GT_ONE)
    good = tool_answer(GT_ONE)
    score = lambda p, gt=gt_call: compute_score(p, gt, 0, "qwen", switches=DEFAULT)  # noqa: E731
    assert score(good) == (4.0, 1.0, 3.0, 0.0)
    wrapped = f"<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\n{good}<|im_end|>"
    assert score(wrapped) == score(good)  # bare == wrapped
    assert score(good.replace("\n", "\r\n"))[1] == 0.0  # CRLF fails the format
    assert score(good.replace("</think>\n", "</think>\n\n"))[1] == 0.0  # blank line after think
    assert score(good + " trailing")[1] == 0.0
    assert score(good + "\n<response>hi</response>")[1] == 0.0  # call + response when GT has only a call
    assert score("<think>a</think><think>b</think>\n" + good.split("\n", 1)[1])[1] == 1.0  # think not counted
    # only the first block is parsed; a second block makes the format fail but not the correctness
    two = good + '\n<tool_call>\n{"name": "x", "parameters": {}}\n</tool_call>'
    assert score(two)[1:3] == (0.0, 3.0)
    # pretty-printed JSON → minimum correctness
    pretty = "<think>r</think>\n<tool_call>\n" + json.dumps(GT_ONE, indent=2) + "\n</tool_call>"
    assert score(pretty)[2] == -3.0
    # response-only GT: correctness is 0 whatever the prediction
    gt_resp = "<think>t</think>\n<response>hello</response>"
    assert score(good, gt_resp) == (0.0, 0.0, 0.0, 0.0)
    assert score("<think>t</think>\n<response>bye</response>", gt_resp) == (1.0, 1.0, 0.0, 0.0)
