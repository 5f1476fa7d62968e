"""Tool usage and cost of hand-written responses."""

import pytest
import torch

from verl.router import RouterAction, ToolFamily
from verl.router.cost import CostWeights, batch_tool_usage, compute_costs, response_tool_usage, trajectory_cost

FAMILIES = {"GetNews": ToolFamily.SEARCH, "add": ToolFamily.CALCULATE, "sendSMS": ToolFamily.OTHER}
THINK = "<think> reasoning </think>\n"
NO_CALL = THINK + "<response> Paris. </response>"
ONE_SEARCH = THINK + '<tool_call>\n{"name": "GetNews", "parameters": {"page": 1}}\n</tool_call>'
TWO_MIXED = THINK + (
    '<tool_call>\n{"name": "GetNews", "parameters": {}}\n{"name": "add", "parameters": {"a": 1, "b": 2}}\n</tool_call>'
)
MALFORMED = THINK + '<tool_call>\n{"name": "GetNews", "parameters": {"page": 1}\n</tool_call>'
CALL_IN_THINK = (
    '<think> maybe <tool_call> {"name": "add", "parameters": {}} </tool_call> no </think>\n<response> 3 </response>'
)


def test_usage_zero_one_two_calls():
    u = response_tool_usage(NO_CALL, FAMILIES)
    assert (u.used_any_tool, u.used_search, u.used_calculate, u.num_calls) == (False, False, False, 0)
    u = response_tool_usage(ONE_SEARCH, FAMILIES)
    assert (u.used_any_tool, u.used_search, u.used_calculate, u.num_calls, u.num_search_calls) == (
        True,
        True,
        False,
        1,
        1,
    )
    u = response_tool_usage(TWO_MIXED + "<|im_end|>", FAMILIES)
    assert (u.used_any_tool, u.used_search, u.used_calculate, u.num_calls) == (True, True, True, 2)
    assert (u.num_search_calls, u.num_calculate_calls) == (1, 1)


def test_malformed_call_still_counts_as_tool_use():
    u = response_tool_usage(MALFORMED, FAMILIES)
    assert u.used_any_tool and u.num_calls == 0 and u.num_invalid_calls == 1
    assert not u.used_search and not u.used_calculate
    unclosed = response_tool_usage(THINK + '<tool_call>\n{"name": "add"', FAMILIES)
    assert unclosed.used_any_tool and unclosed.num_calls == 0


def test_call_inside_think_is_not_a_call():
    u = response_tool_usage(CALL_IN_THINK, FAMILIES)
    assert not u.used_any_tool and u.num_calls == 0


def test_other_and_unknown_tools_follow_other_as():
    text = (
        THINK + '<tool_call>\n{"name": "sendSMS", "parameters": {}}\n{"name": "compute_tax", "parameters": {}}'
        "\n</tool_call>"
    )
    u = response_tool_usage(text, FAMILIES)  # OTHER -> search; unlisted compute_tax -> CALCULATE by its name
    assert (u.num_search_calls, u.num_calculate_calls) == (1, 1)
    u = response_tool_usage(text, FAMILIES, other_as=RouterAction.CALCULATE)
    assert (u.num_search_calls, u.num_calculate_calls) == (0, 2)
    u = response_tool_usage(text, FAMILIES, other_as=None)
    assert (u.num_search_calls, u.num_calculate_calls, u.used_search) == (0, 1, False)


def test_costs_with_weights():
    responses = [NO_CALL, ONE_SEARCH, TWO_MIXED, MALFORMED]
    cost, usage = compute_costs(responses, [FAMILIES] * 4)
    assert cost.tolist() == [0.0, 1.0, 1.0, 1.0]  # default: any_tool=1
    assert usage["num_calls"].tolist() == [0.0, 1.0, 2.0, 0.0]
    w = CostWeights(any_tool=0.5, search=1.0, calculate=2.0, per_call=0.25)
    cost, _ = compute_costs(responses, [FAMILIES] * 4, w)
    assert cost.tolist() == [0.0, 0.5 + 1.0 + 0.25, 0.5 + 1.0 + 2.0 + 0.5, 0.5]
    direct = trajectory_cost(
        torch.tensor([1, 0]), torch.tensor([1, 0]), torch.tensor([0, 0]), torch.tensor([3, 0]), 1.0, 0.0, 0.0, 0.1
    )
    torch.testing.assert_close(direct, torch.tensor([1.3, 0.0]))


def test_cost_weights_config_and_errors():
    assert CostWeights.from_config({"any_tool": 2, "per_call": "0.5"}) == CostWeights(2.0, 0.0, 0.0, 0.5)
    assert CostWeights.from_config(None) == CostWeights()
    with pytest.raises(ValueError, match=r"router.cost_weights.anytool: unknown"):
        CostWeights.from_config({"anytool": 1})
    with pytest.raises(ValueError, match=r"router.cost_weights.search: expected a number"):
        CostWeights.from_config({"search": "high"})
    with pytest.raises(ValueError, match="2 responses but 1 family maps"):
        batch_tool_usage([NO_CALL, NO_CALL], [FAMILIES])
