"""router.route_sampling=stratified: every route for every prompt, the head trained on the expectation over routes,
λ stepped on the policy's expected cost (docs/router.md, "Router policy update")."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.router.controller import RouterController
from verl.router.head import stratified_actions
from verl.router.loss import (
    compute_route_advantages,
    compute_router_loss,
    group_route_means,
    policy_expected_value,
)
from verl.trainer.config_utils import default_section


def test_stratified_actions_give_every_prompt_every_route_reproducibly():
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a = stratified_actions(50, 3, generator=g1)
    assert torch.equal(a, stratified_actions(50, 3, generator=g2))
    groups = a.reshape(50, 3)
    assert all(sorted(row.tolist()) == [0, 1, 2] for row in groups)
    assert len({tuple(row.tolist()) for row in groups}) > 1  # permutations differ between prompts
    four = stratified_actions(40, 4, generator=g1).reshape(40, 4)
    for row in four:
        assert set(row.tolist()) == {0, 1, 2} and row[3] == row[0]  # the cycle: copy 3 repeats copy 0's route
    with pytest.raises(ValueError, match="at least 3 copies"):
        stratified_actions(2, 2)


def test_route_advantages_hand_computed():
    # group p: routes A, S, C, S with r = 1, 4, 3, 2 -> per-route means (1, 3, 3), mean over routes 7/3,
    # unbiased std of (1, 4, 3, 2) = sqrt(5/3); group q lacks CALCULATE -> no signal.
    r = torch.tensor([1.0, 4.0, 3.0, 2.0, 5.0, 0.0, 1.0])
    actions = torch.tensor([0, 1, 2, 1, 0, 1, 1])
    uid = np.array(["p"] * 4 + ["q"] * 3, dtype=object)
    adv = compute_route_advantages(r, actions, uid, norm="group")
    std = math.sqrt(5 / 3)
    expected = torch.tensor([1 - 7 / 3, 3 - 7 / 3, 3 - 7 / 3]) / (std + 1e-6)
    for row in range(4):
        torch.testing.assert_close(adv[row], expected, atol=1e-6, rtol=0)
    assert torch.all(adv[4:] == 0)
    # an unscored row leaves the route means and the std: p without row 3 -> means (1, 4, 3), std of (1, 4, 3) = 1.5275
    valid = torch.tensor([True, True, True, False, True, True, True])
    adv = compute_route_advantages(r, actions, uid, valid, norm="group")
    torch.testing.assert_close(adv[0], torch.tensor([-1.6667, 1.3333, 0.3333]) / math.sqrt(7 / 3), atol=1e-4, rtol=0)
    # the default scale is one std over the whole batch (here of all seven r): prompts keep their relative sizes
    batch_std = float(r.std(unbiased=True))
    adv = compute_route_advantages(r, actions, uid)
    torch.testing.assert_close(adv[0], torch.tensor([1 - 7 / 3, 3 - 7 / 3, 3 - 7 / 3]) / (batch_std + 1e-6))
    torch.testing.assert_close(
        compute_route_advantages(r, actions, uid, norm="none")[1], torch.tensor([1 - 7 / 3, 3 - 7 / 3, 3 - 7 / 3])
    )
    with pytest.raises(ValueError, match="norm must be one of"):
        compute_route_advantages(r, actions, uid, norm="std")
    means, present = group_route_means(r, actions, uid, valid)
    assert present[4].tolist() == [True, True, False] and means[4].tolist() == [5.0, 0.5, 0.0]


def test_expected_route_loss_is_the_exact_policy_gradient():
    """−Σ_a π(a)·A(a) has the gradient of the expected reward Σ_a π(a)·R̄(a) (the mean over routes is a baseline that
    cancels), and equals the sampled loss −log π(a)·A(a) averaged over a ~ π."""
    torch.manual_seed(0)
    logits = torch.randn(1, 3, requires_grad=True)
    values = torch.tensor([[0.5, 2.0, -1.0]])
    centred = values - values.mean(-1, keepdim=True)
    loss, _ = compute_router_loss(logits, torch.zeros(1, dtype=torch.long), torch.zeros(1), route_advantages=centred)
    (grad,) = torch.autograd.grad(loss, logits)
    (exact,) = torch.autograd.grad(-(torch.softmax(logits, -1) * values).sum(), logits)
    torch.testing.assert_close(grad, exact)
    probs = torch.softmax(logits, -1).detach()[0]
    sampled = torch.zeros(1, 3)
    for a in range(3):
        l_a, _ = compute_router_loss(logits, torch.tensor([a]), centred[:, a])
        sampled += probs[a] * torch.autograd.grad(l_a, logits)[0]
    torch.testing.assert_close(grad, sampled)
    with pytest.raises(ValueError, match="route_advantages"):
        compute_router_loss(
            logits,
            torch.zeros(1, dtype=torch.long),
            torch.zeros(1),
            route_advantages=centred,
            old_log_probs=torch.zeros(1),
        )


def test_natural_route_gradient_does_not_vanish_when_the_policy_saturates():
    """route_pg=natural: the logits' gradient is −A(a)/B whatever π; the exact one shrinks with π(tool routes)."""
    centred = torch.tensor([[-1.0, 0.5, 0.5]])  # the tool routes are better by 1.5
    saturated = torch.tensor([[6.0, 0.0, 0.0]], requires_grad=True)  # π(ANSWER) ≈ 0.995
    exact, _ = compute_router_loss(
        saturated, torch.zeros(1, dtype=torch.long), torch.zeros(1), route_advantages=centred
    )
    (g_exact,) = torch.autograd.grad(exact, saturated)
    natural, _ = compute_router_loss(
        saturated, torch.zeros(1, dtype=torch.long), torch.zeros(1), route_advantages=centred, route_pg="natural"
    )
    (g_natural,) = torch.autograd.grad(natural, saturated)
    torch.testing.assert_close(g_natural, -centred)
    assert g_exact.abs().max() < 0.02 * g_natural.abs().max()
    # shifting every logit by a constant changes neither the loss nor its gradient (Σ_a A(a) = 0)
    shifted, _ = compute_router_loss(
        saturated + 3.0, torch.zeros(1, dtype=torch.long), torch.zeros(1), route_advantages=centred, route_pg="natural"
    )
    assert float(shifted) == pytest.approx(float(natural))
    with pytest.raises(ValueError, match="route_pg must be one of"):
        compute_router_loss(
            saturated, torch.zeros(1, dtype=torch.long), torch.zeros(1), route_advantages=centred, route_pg="npg"
        )


def test_policy_expected_value_weights_each_group_once():
    # group p (3 rows): route costs (0, 1, 1), π = (0.5, 0.25, 0.25) -> 0.5; group q (4 rows): costs (0, 1, 1),
    # π = (0.9, 0.1, 0) -> 0.1; mean over groups 0.3 (not weighted by rows)
    cost = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    actions = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    uid = np.array(["p"] * 3 + ["q"] * 4, dtype=object)
    probs = torch.tensor([[0.5, 0.25, 0.25]] * 3 + [[0.9, 0.1, 0.0]] * 4)
    assert policy_expected_value(cost, actions, uid, probs) == pytest.approx(0.3)
    assert math.isnan(policy_expected_value(cost[:2], actions[:2], uid[:2], probs[:2]))  # no group has every route


def _scored_batch(tokenizer, logits):
    """Two prompts x 3 copies routed ANSWER, SEARCH, CALCULATE; the tool routes call a tool (cost 1) and score 3, the
    ANSWER copies score 1 (prompt a) or 2.5 (prompt b)."""
    plain = tokenizer("<think> t </think>\n<response> hi </response>", add_special_tokens=False)["input_ids"]
    call = tokenizer(
        '<think> t </think>\n<tool_call>\n{"name": "x", "parameters": {}}\n</tool_call>', add_special_tokens=False
    )["input_ids"]
    rows = [plain, call, call] * 2
    width = max(map(len, rows))
    responses = torch.tensor([r + [tokenizer.eos_token_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    scores = torch.zeros(6, width)
    scores[:, 0] = torch.tensor([1.0, 3.0, 3.0, 2.5, 3.0, 3.0])
    families = np.empty(6, dtype=object)
    families[:] = [{}] * 6
    return DataProto.from_dict(
        {
            "responses": responses,
            "response_mask": mask,
            "token_level_scores": scores,
            "router_action": torch.tensor([0, 1, 2, 0, 1, 2]),
            "router_logits": logits,
        },
        non_tensors={"uid": np.array(["a"] * 3 + ["b"] * 3, dtype=object), "tool_families": families},
    )


def test_stratified_score_prices_routes_and_steps_lambda_on_the_policy_cost(tokenizer):
    data = default_section("data", max_prompt_length=64)
    cfg = default_section("router", route_sampling="stratified", lambda_init=1.0, dual_lr=0.5, budget_B=0.3)
    # the policy puts 0.8 on ANSWER everywhere: its cost is 0.2 although two thirds of the batch called a tool
    logits = torch.log(torch.tensor([[0.8, 0.1, 0.1]] * 6))
    batch = _scored_batch(tokenizer, logits)
    metrics = RouterController(cfg, data, tokenizer).score(batch, step=1)
    assert metrics["router/mean_cost"] == pytest.approx(2 / 3)
    assert metrics["router/policy_cost"] == pytest.approx(0.2)
    assert metrics["router/lambda"] == pytest.approx(1.0 + 0.5 * (0.2 - 0.3))
    # task rewards under the policy: a 0.8·1 + 0.2·3 = 1.4, b 0.8·2.5 + 0.2·3 = 2.6
    assert metrics["router/policy_task_reward"] == pytest.approx(2.0)
    assert metrics["router/policy_prob_answer"] == pytest.approx(0.8)
    adv = batch.batch["router_route_advantages"]
    # λ = 1 prices the tool routes at 3 − 1 = 2: prompt a prefers them (ANSWER 1), prompt b prefers ANSWER (2.5)
    assert adv[0, 0] < 0 < adv[0, 1] and adv[0, 1] == adv[0, 2]
    assert adv[3, 0] > 0 > adv[3, 1]
    # one scale for the batch: prompt a's preference (tools by 1 point) weighs twice prompt b's (ANSWER by 0.5)
    torch.testing.assert_close(adv[0], -2 * adv[3])
    # sampled routing (the default): λ steps on the batch's own mean cost and no route advantages are written
    batch = _scored_batch(tokenizer, logits)
    metrics = RouterController(
        default_section("router", lambda_init=1.0, dual_lr=0.5, budget_B=0.3), data, tokenizer
    ).score(batch, step=1)
    assert metrics["router/policy_cost"] == pytest.approx(2 / 3)
    assert metrics["router/lambda"] == pytest.approx(1.0 + 0.5 * (2 / 3 - 0.3))
    assert "router_route_advantages" not in batch.batch.keys()


def test_stratified_expand_routes_every_prompt_to_every_route_but_validation_stays_greedy(tokenizer):
    raw = np.empty(2, dtype=object)
    raw[:] = [
        [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": f"q{i}"}] for i in range(2)
    ]
    ids = torch.ones(2, 4, dtype=torch.long)

    class FakeWorkers:
        def compute_router_logits(self, prompts):
            return DataProto.from_dict({"router_logits": torch.tensor([[5.0, 0.0, 0.0]] * len(prompts))})

    def batch():
        return DataProto.from_dict(
            {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(4).repeat(2, 1)},
            non_tensors={"raw_prompt": raw},
        )

    controller = RouterController(
        default_section("router", route_sampling="stratified"), default_section("data", max_prompt_length=64), tokenizer
    )
    out = controller.expand(batch(), 3, validate=False, worker_group=FakeWorkers())
    actions = out.batch["router_action"].reshape(2, 3)
    assert all(sorted(row.tolist()) == [0, 1, 2] for row in actions)  # although the policy is almost all ANSWER
    expected_lp = torch.log_softmax(torch.tensor([5.0, 0.0, 0.0]), -1)[out.batch["router_action"]]
    torch.testing.assert_close(out.batch["router_log_prob"], expected_lp)
    val = controller.expand(batch(), 1, validate=True, worker_group=FakeWorkers())
    assert val.batch["router_action"].tolist() == [0, 0]


def test_value_mode_learns_route_values_and_prices_them_when_routing(tokenizer):
    """router.loss_mode=value (docs/router.md "Route values"): the running route means come first, the head's targets
    are each copy's task reward minus its route's mean, and λ turns the head's values into the routing policy."""
    data = default_section("data", max_prompt_length=64)
    cfg = default_section(
        "router",
        route_sampling="stratified",
        loss_mode="value",
        lambda_init=1.0,
        dual_lr=0.0,
        value_temperature=1.0,
        entropy_coeff=0.0,
        sup_coeff=0.0,
    )
    controller = RouterController(cfg, data, tokenizer)
    # before any batch: b = c̄ = 0, so a zero head is the uniform policy
    torch.testing.assert_close(controller.policy_logits(torch.zeros(1, 3)), torch.zeros(1, 3))
    batch = _scored_batch(tokenizer, torch.zeros(6, 3))  # task (1, 3, 3 | 2.5, 3, 3), tool copies cost 1
    metrics = controller.score(batch, step=1)
    assert metrics["router/value_baseline_answer"] == pytest.approx(1.75)
    assert metrics["router/value_baseline_search"] == pytest.approx(3.0)
    assert metrics["router/value_cost_calculate"] == pytest.approx(1.0)
    torch.testing.assert_close(batch.batch["router_value_target"], torch.tensor([-0.75, 0, 0, 0.75, 0, 0]))
    # the head's targets do not depend on λ: a run at another price (or budget) trains the same head
    other = RouterController(
        default_section(
            "router", route_sampling="stratified", loss_mode="value", lambda_init=4.0, entropy_coeff=0.0, sup_coeff=0.0
        ),
        data,
        tokenizer,
    )
    priced = _scored_batch(tokenizer, torch.zeros(6, 3))
    other.score(priced, step=1)
    assert torch.equal(priced.batch["router_value_target"], batch.batch["router_value_target"])
    assert metrics["router/policy_cost"] == pytest.approx(2 / 3)  # the uniform policy at routing time
    assert metrics["router/value_gap_std"] == 0.0  # a zero head tells no prompt from another
    # routing: z = b + h − λ·c̄ = (1.75 + h_A, 3 − 1 + h_S, 2 + h_C)
    h = torch.tensor([[0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(controller.policy_logits(h), torch.tensor([[2.25, 2.0, 2.0], [1.75, 2.0, 2.0]]))
    controller.lagrange.value = 1.5  # dearer tools: both prompts now answer
    assert controller.policy_logits(h).argmax(-1).tolist() == [0, 0]

    class FakeWorkers:
        def compute_router_logits(self, prompts):
            return DataProto.from_dict({"router_logits": h[: len(prompts)]})

    raw = np.empty(2, dtype=object)
    raw[:] = [
        [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": f"q{i}"}] for i in range(2)
    ]
    ids = torch.ones(2, 4, dtype=torch.long)
    prompts = DataProto.from_dict(
        {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(4).repeat(2, 1)},
        non_tensors={"raw_prompt": raw},
    )
    val = controller.expand(prompts, 1, validate=True, worker_group=FakeWorkers())
    assert val.batch["router_action"].tolist() == [0, 0]
    torch.testing.assert_close(val.batch["router_logits"], controller.policy_logits(h))
    # the route values are driver state: saved, restored, and required to resume a value-mode run
    state = controller.state_dict()
    resumed = RouterController(cfg, data, tokenizer)
    resumed.load_state_dict(state)
    torch.testing.assert_close(resumed.policy_logits(h), controller.policy_logits(h))
    with pytest.raises(ValueError, match="no route values"):
        resumed.load_state_dict({k: v for k, v in state.items() if k != "route_values"})


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["router.loss_mode=value", "actor_rollout_ref.rollout.n=3"], "set router.route_sampling=stratified"),
        (
            ["router.loss_mode=value", "router.route_sampling=stratified", "actor_rollout_ref.rollout.n=3"],
            "router.entropy_coeff=0.01: router.loss_mode=value",
        ),
        (
            [
                "router.loss_mode=value",
                "router.route_sampling=stratified",
                "actor_rollout_ref.rollout.n=3",
                "router.entropy_coeff=0",
                "router.sup_coeff=0",
                "router.value_temperature=0",
            ],
            "value_temperature must be > 0",
        ),
        (["router.loss_mode=q", "actor_rollout_ref.rollout.n=3"], "router.loss_mode must be one of"),
        (["router.route_sampling=stratified", "actor_rollout_ref.rollout.n=2"], "rollout.n >= 3, got 2"),
        (["router.route_sampling=uniform", "actor_rollout_ref.rollout.n=4"], "router.route_sampling must be"),
        (["router.route_adv_norm=std", "actor_rollout_ref.rollout.n=4"], "router.route_adv_norm must be"),
        (["router.route_pg=npg", "actor_rollout_ref.rollout.n=4"], "router.route_pg must be"),
    ],
)
def test_stratified_config_is_checked_at_load(overrides, message):
    from verl.trainer.config_utils import ConfigError, load_default_config, normalize_config, validate_config

    cfg = normalize_config(load_default_config(["trainer.device=cpu", "router.enable=true"] + overrides))
    with pytest.raises(ConfigError, match=message):
        validate_config(cfg, check_files=False)
