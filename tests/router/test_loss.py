"""Router rewards, token-level placement, GRPO advantages, loss value/gradients, metrics."""

import math

import numpy as np
import pytest
import torch

from verl.router import RouterAction, target_action_ids
from verl.router.loss import (
    compute_router_advantages,
    compute_router_loss,
    compute_router_rewards,
    router_batch_metrics,
    router_token_level_rewards,
)

LOG3 = math.log(3.0)


def test_router_rewards():
    r = compute_router_rewards(torch.tensor([4.0, 1.0, -3.0, 4.0]), torch.tensor([1.0, 0.0, 0.0, 2.0]), 0.5)
    assert r.tolist() == [3.5, 1.0, -3.0, 3.0]
    with pytest.raises(ValueError, match="lambda must be >= 0"):
        compute_router_rewards(torch.zeros(2), torch.zeros(2), -0.1)


def test_token_level_placement():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    out = router_token_level_rewards(torch.tensor([2.0, -1.0, 0.5]), mask)
    expected = torch.zeros(3, 5)
    expected[0, 2], expected[1, 4], expected[2, 0] = 2.0, -1.0, 0.5
    assert torch.equal(out, expected)
    with pytest.raises(ValueError, match="no valid position"):
        router_token_level_rewards(torch.tensor([1.0]), torch.zeros(1, 3))


def test_group_of_four_advantages_hand_computed():
    # group "a": rewards 1, 2, 3, 6 (mean 3, unbiased std sqrt(14/3)); group "b": constant -> 0; interleaved rows
    rewards = torch.tensor([1.0, 0.5, 2.0, 3.0, 0.5, 6.0])
    uid = np.array(["a", "b", "a", "a", "b", "a"], dtype=object)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]])
    adv = compute_router_advantages(router_token_level_rewards(rewards, mask), mask, uid)
    std = math.sqrt(14.0 / 3.0)
    expected = [-2 / (std + 1e-6), 0.0, -1 / (std + 1e-6), 0.0, 0.0, 3 / (std + 1e-6)]
    assert adv.shape == (6,)
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-6, rtol=1e-6)
    dr = compute_router_advantages(router_token_level_rewards(rewards, mask), mask, uid, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(dr, torch.tensor([-2.0, 0.0, -1.0, 0.0, 0.0, 3.0]))


def test_loss_value_hand_computed():
    logits = torch.zeros(2, 3, requires_grad=True)  # uniform policy
    actions = torch.tensor([1, 2])
    adv = torch.tensor([1.0, -0.5])
    targets = torch.tensor([0, -1])
    loss, m = compute_router_loss(logits, actions, adv, targets, entropy_coeff=0.1, sup_coeff=0.05)
    # pg = -mean(log(1/3)*1, log(1/3)*-0.5) = 0.25*log3; H = log3; CE(row 0) = log3
    assert m["router/pg_loss"] == pytest.approx(0.25 * LOG3)
    assert m["router/entropy"] == pytest.approx(LOG3)
    assert m["router/sup_loss"] == pytest.approx(LOG3)
    assert m["router/acc_vs_weak_label"] == 1.0 and m["router/labelled_frac"] == 0.5
    assert loss.item() == pytest.approx(0.25 * LOG3 - 0.1 * LOG3 + 0.05 * LOG3)


def test_policy_gradient_matches_reinforce_and_sign():
    torch.manual_seed(0)
    logits = torch.randn(4, 3, requires_grad=True)
    actions = torch.tensor([0, 1, 2, 1])
    adv = torch.tensor([1.0, -2.0, 0.5, 0.0])
    loss, _ = compute_router_loss(logits, actions, adv, entropy_coeff=0.0, sup_coeff=0.0)
    loss.backward()
    probs = torch.softmax(logits.detach(), -1)
    onehot = torch.nn.functional.one_hot(actions, 3).float()
    expected = -(onehot - probs) * adv[:, None] / 4  # d/dlogits of -mean(log pi(a) A)
    torch.testing.assert_close(logits.grad, expected)

    # one SGD step: positive advantage raises pi(a), negative lowers it
    for sign in (1.0, -1.0):
        x = torch.zeros(1, 3, requires_grad=True)
        loss, _ = compute_router_loss(x, torch.tensor([2]), torch.tensor([sign]), sup_coeff=0.0)
        loss.backward()
        new_p = torch.softmax(x.detach() - 1.0 * x.grad, -1)[0, 2]
        assert (new_p > 1 / 3) if sign > 0 else (new_p < 1 / 3)


def test_clipping_with_old_log_probs_stops_gradient():
    logits = torch.zeros(1, 3, requires_grad=True)
    old = torch.log(torch.tensor([1 / 3])) - 1.0  # ratio e > 1 + 0.2 with A > 0 -> clipped
    loss, m = compute_router_loss(logits, torch.tensor([0]), torch.tensor([1.0]), old_log_probs=old, sup_coeff=0.0)
    loss.backward()
    assert torch.all(logits.grad == 0) and m["router/pg_clipfrac"] == 1.0


def test_supervised_term_pulls_towards_label_and_skips_mixed():
    logits = torch.zeros(3, 3, requires_grad=True)
    targets = target_action_ids(["SEARCH", "MIXED", None])
    assert targets.tolist() == [1, -1, -1]
    loss, _ = compute_router_loss(logits, torch.tensor([0, 0, 0]), torch.zeros(3), targets, sup_coeff=1.0)
    loss.backward()
    assert logits.grad[0, 1] < 0 and torch.all(logits.grad[1:] == 0)  # descent raises logit 1 of row 0 only
    _, m = compute_router_loss(logits, torch.tensor([0, 0, 0]), torch.zeros(3), torch.full((3,), -1))
    assert m["router/sup_loss"] == 0.0 and "router/acc_vs_weak_label" not in m
    with pytest.raises(ValueError, match="router_target_action row 0"):
        target_action_ids(["maybe"])
    with pytest.raises(ValueError, match="actions must lie in 0..2"):
        compute_router_loss(logits, torch.tensor([0, 3, 0]), torch.zeros(3))


def test_batch_metrics():
    actions = torch.tensor([RouterAction.ANSWER, RouterAction.ANSWER, RouterAction.SEARCH, RouterAction.CALCULATE])
    m = router_batch_metrics(
        actions,
        torch.tensor([1.0, 0.0, 1.0, 2.0]),
        torch.tensor([1.0, 2.0, 3.0, 4.0]),
        torch.tensor([0.5, 2.0, 2.5, 3.0]),
        torch.tensor([1.0, 0.0, 1.0, 1.0]),
    )
    assert m == {
        "router/frac_answer": 0.5,
        "router/frac_search": 0.25,
        "router/frac_calculate": 0.25,
        "router/mean_cost": 1.0,
        "router/mean_task_reward": 2.5,
        "router/mean_router_reward": 2.0,
        "router/tool_use_rate_when_answer": 0.5,
    }
    m = router_batch_metrics(torch.tensor([1]), torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1))
    assert "router/tool_use_rate_when_answer" not in m
