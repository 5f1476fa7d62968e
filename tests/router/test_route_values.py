"""router.loss_mode=value: the head regresses each route's task reward, the price λ·cost is applied when routing
(verl/router/value.py; docs/router.md, "Route values"). Hand-worked values."""

from __future__ import annotations

import math

import pytest
import torch

from verl.router.value import (
    RouteValueBaseline,
    compute_router_value_loss,
    lambda_for_cost,
    mean_route_cost,
    reprice_probs,
    value_policy_logits,
    value_targets,
)
import itertools


def test_policy_logits_price_the_routes_at_decision_time():
    # b = (−3, 0, 0.2), h = (0.5, 0, −0.5), c̄ = (0, 1, 1), λ = 2, τ = 0.5:
    # z = ((−3 + 0.5 − 0), (0 + 0 − 2), (0.2 − 0.5 − 2)) / 0.5 = (−5, −4, −4.6)
    h = torch.tensor([[0.5, 0.0, -0.5]])
    baseline, cost = torch.tensor([-3.0, 0.0, 0.2]), torch.tensor([0.0, 1.0, 1.0])
    z = value_policy_logits(h, baseline, cost, 2.0, 0.5)
    torch.testing.assert_close(z, torch.tensor([[-5.0, -4.0, -4.6]]))
    # Q = b + h = (−2.5, 0, −0.3): SEARCH beats ANSWER by 2.5 − λ, so the greedy route flips exactly at λ = 2.5
    assert int(value_policy_logits(h, baseline, cost, 2.49, 1.0).argmax()) == 1
    assert int(value_policy_logits(h, baseline, cost, 2.51, 1.0).argmax()) == 0
    # the policy's expected cost falls monotonically as λ rises, whatever the head learned
    costs = [
        float((torch.softmax(value_policy_logits(h, baseline, cost, lam, 1.0), -1) * cost).sum())
        for lam in (0.0, 1.0, 2.0, 3.0, 4.0, 6.0)
    ]
    assert all(a > b for a, b in itertools.pairwise(costs))
    with pytest.raises(ValueError, match="temperature > 0"):
        value_policy_logits(h, baseline, cost, 1.0, 0.0)
    with pytest.raises(ValueError, match="must be \\[B, 3\\]"):
        value_policy_logits(h[:, :2], baseline, cost, 1.0, 1.0)


def test_repriced_probs_equal_the_policy_at_the_new_price():
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(5, 3, generator=gen)
    baseline, cost, tau = torch.tensor([-1.0, 0.3, 0.1]), torch.tensor([0.0, 0.9, 1.2]), 0.25
    at_1 = torch.softmax(value_policy_logits(h, baseline, cost, 1.0, tau), -1)
    for lam in (0.0, 1.0, 2.5, 7.0):
        want = torch.softmax(value_policy_logits(h, baseline, cost, lam, tau).double(), -1)
        torch.testing.assert_close(reprice_probs(at_1, cost, 1.0, lam, tau), want, atol=1e-6, rtol=0)
    # a route the policy never takes stays untaken at any price
    assert float(reprice_probs(torch.tensor([[0.5, 0.5, 0.0]]), cost, 0.0, 3.0, 1.0)[0, 2]) == 0.0
    with pytest.raises(ValueError, match="must be \\[B, 3\\]"):
        reprice_probs(torch.ones(2, 2) / 2, cost, 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="prices must be finite and >= 0"):
        reprice_probs(at_1, cost, 0.0, -1.0, 1.0)
    with pytest.raises(ValueError, match="prices must be finite"):
        reprice_probs(at_1, cost, float("nan"), 1.0, 1.0)
    with pytest.raises(ValueError, match="every row with some mass"):
        reprice_probs(torch.zeros(1, 3), cost, 0.0, 1.0, 1.0)


def test_lambda_for_cost_hand_worked():
    # c̄ = (0, 1, 1), τ = 1, both prompts at (1/2, 1/2, 0) when λ = 0: at λ the SEARCH probability, which is the mean
    # cost, is e^−λ / (1 + e^−λ); a budget of 1/4 needs e^−λ = 1/3, λ = ln 3
    cost = torch.tensor([0.0, 1.0, 1.0])
    probs = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    assert lambda_for_cost(probs, cost, 0.0, 1.0, 0.25) == pytest.approx(math.log(3), abs=1e-5)
    # the same policy recorded at another price gives the same λ
    at_2 = reprice_probs(probs, cost, 0.0, 2.0, 1.0)
    assert lambda_for_cost(at_2, cost, 2.0, 1.0, 0.25) == pytest.approx(math.log(3), abs=1e-5)
    # two prompts that differ: their costs e^−λ/(1+e^−λ) and 3e^−λ/(1+3e^−λ) are 1/4 and 1/2 at λ = ln 3, mean 3/8
    mixed = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.75, 0.0]])
    lam = lambda_for_cost(mixed, cost, 0.0, 1.0, 0.375)
    assert lam == pytest.approx(math.log(3), abs=1e-5)
    assert float((reprice_probs(mixed, cost, 0.0, lam, 1.0) @ cost.double()).mean()) == pytest.approx(0.375, abs=1e-6)
    # slack constraint: the policy spends 1/2 at λ = 0, under a budget of 0.6, so λ = 0
    assert lambda_for_cost(probs, cost, 0.0, 1.0, 0.6) == 0.0
    with pytest.raises(ValueError, match="not above the cheapest route's cost"):
        lambda_for_cost(probs, cost, 0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="no prompts"):
        lambda_for_cost(torch.zeros(0, 3), cost, 0.0, 1.0, 0.2)
    with pytest.raises(ValueError, match="finite number"):
        lambda_for_cost(probs, cost, 0.0, 1.0, float("nan"))
    # recorded above the bracket's first end (λ = 5): the same λ
    assert lambda_for_cost(reprice_probs(mixed, cost, 0.0, 5.0, 1.0), cost, 5.0, 1.0, 0.375) == pytest.approx(
        math.log(3), abs=1e-5
    )
    # a prompt that never takes the cheapest route: no price brings its cost down
    with pytest.raises(ValueError, match="no price up to 1e12"):
        lambda_for_cost(torch.tensor([[0.0, 1.0, 0.0]]), cost, 0.0, 1.0, 0.5)


def test_lambda_for_cost_greedy_routes():
    """The greedy route's cost: prompt 1 ties at λ = 0 (argmax takes ANSWER), prompt 2 leaves SEARCH for ANSWER at
    λ = ln 3 (3 e^−λ = 1): its mean cost is 1/2 below ln 3 and 0 from it on."""
    cost = torch.tensor([0.0, 1.0, 1.0])
    mixed = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.75, 0.0]])
    assert mean_route_cost(mixed, cost, 0.0, 0.0, 1.0, greedy=True) == 0.5
    assert mean_route_cost(mixed, cost, 0.0, 0.0, 1.0) == pytest.approx(0.625)
    assert lambda_for_cost(mixed, cost, 0.0, 1.0, 0.5, greedy=True) == 0.0
    for budget in (0.25, 0.0):  # the step: any budget below 1/2 needs λ = ln 3; 0 is reachable greedily
        lam = lambda_for_cost(mixed, cost, 0.0, 1.0, budget, greedy=True)
        assert lam == pytest.approx(math.log(3), rel=1e-5) and lam >= math.log(3)
        assert mean_route_cost(mixed, cost, 0.0, lam, 1.0, greedy=True) == 0.0


def test_value_loss_hand_computed_and_unscored_rows_change_nothing():
    values = torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]], requires_grad=True)
    actions = torch.tensor([2, 1])
    task, baseline = torch.tensor([4.0, 1.0]), torch.tensor([0.0, 0.5, 0.0])
    targets = value_targets(task, actions, baseline)  # (4 − 0, 1 − 0.5)
    torch.testing.assert_close(targets, torch.tensor([4.0, 0.5]))
    loss, metrics = compute_router_value_loss(values, actions, targets)
    # errors (3 − 4, −1 − 0.5) = (−1, −1.5): ½·mean(1, 2.25) = 0.8125
    assert loss.item() == pytest.approx(0.8125)
    (grad,) = torch.autograd.grad(loss, values)
    # d/dh of ½·mean(err²) = err / 2 on each row's own route only
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0, -0.5], [0.0, -0.75, 0.0]]))
    assert metrics["router/value_rows"] == 2.0
    # explained variance: 1 − Var(err)/Var(target) = 1 − 0.125 / 6.125
    assert metrics["router/value_explained_var"] == pytest.approx(1 - 0.125 / 6.125)
    # an unscored row (NaN target) adds nothing to the loss or the gradient
    more = torch.cat([values, torch.tensor([[9.0, 9.0, 9.0]])]).detach().requires_grad_()
    nan_targets = value_targets(
        torch.cat([task, torch.tensor([7.0])]),
        torch.tensor([2, 1, 0]),
        baseline,
        valid=torch.tensor([True, True, False]),
    )
    assert math.isnan(float(nan_targets[2]))
    loss2, _ = compute_router_value_loss(more, torch.tensor([2, 1, 0]), nan_targets)
    assert loss2.item() == pytest.approx(0.8125)
    (grad2,) = torch.autograd.grad(loss2, more)
    torch.testing.assert_close(grad2[:2], grad)
    assert torch.all(grad2[2] == 0)
    empty, metrics = compute_router_value_loss(more, torch.tensor([2, 1, 0]), torch.full((3,), float("nan")))
    assert empty.item() == 0.0 and metrics["router/value_rows"] == 0.0


def test_route_baseline_running_means_and_state():
    tracker = RouteValueBaseline(decay=0.5)
    assert tracker.reward.tolist() == [0.0, 0.0, 0.0]
    task = torch.tensor([1.0, 3.0, 2.0, 2.0, 5.0])
    costs = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0])
    actions = torch.tensor([0, 1, 2, 0, 1])
    valid = torch.tensor([True, True, True, True, False])
    metrics = tracker.update(task, costs, actions, valid)
    # first batch sets each route: ANSWER (1 + 2)/2; SEARCH only the scored row (3), its cost over both rows (1)
    assert tracker.reward.tolist() == [1.5, 3.0, 2.0] and tracker.cost.tolist() == [0.0, 1.0, 1.0]
    assert metrics["router/value_baseline_search"] == 3.0 and metrics["router/value_cost_answer"] == 0.0
    # second batch: EMA with weight 0.5; a route absent from the batch keeps its value
    tracker.update(torch.tensor([3.5, 1.0]), torch.tensor([0.0, 0.0]), torch.tensor([0, 1]))
    assert tracker.reward.tolist() == [2.5, 2.0, 2.0] and tracker.cost.tolist() == [0.0, 0.5, 1.0]
    restored = RouteValueBaseline(decay=0.5)
    restored.load_state_dict(tracker.state_dict())
    assert restored.reward.tolist() == tracker.reward.tolist() and restored.seen.tolist() == [True] * 3
    with pytest.raises(ValueError, match="'cost' missing"):
        restored.load_state_dict({"reward": [0, 0, 0], "seen": [True] * 3})
    with pytest.raises(ValueError, match="value_baseline_decay"):
        RouteValueBaseline(decay=1.0)
