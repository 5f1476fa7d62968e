"""router.value_fit=ridge: each route's task reward fitted in closed form by ridge regression on the pooled prompt
features (verl/router/value.py RidgeRouteValues; docs/router.md, "Ridge fit"). Hand-worked values, a float64
reference, invariances, the component's update and resume, the controller's baseline and the load-time checks."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl.router.component import RouterComponent
from verl.router.value import RidgeRouteValues
from verl.trainer.config_errors import ConfigError
from verl.trainer.config_utils import default_section, load_default_config
from verl.trainer.router_config_checks import validate_router_settings


def test_hand_worked_one_feature():
    # route 0 sees (x, y) = (0, 0), (1, 1), (2, 2); α = 1, no normalisation:
    # x̄ = ȳ = 1, C = Σ(x − x̄)² = 2, c = Σ(x − x̄)(y − ȳ) = 2, w = 2 / (2 + 1) = 2/3, c0 = 1 − (2/3)·1 = 1/3
    ridge = RidgeRouteValues(hidden_size=1, alpha=1.0)
    ridge.add(
        RidgeRouteValues.increments(
            torch.tensor([[0.0], [1.0], [2.0], [5.0]]), torch.tensor([0, 0, 0, 1]), torch.tensor([0.0, 1.0, 2.0, 7.0])
        )
    )
    weight, bias = ridge.solve()
    assert weight[0, 0].item() == pytest.approx(2 / 3) and bias[0].item() == pytest.approx(1 / 3)
    # route 1 has one point: no spread, w = 0 and the intercept is its reward; route 2 was never observed
    assert weight[1, 0].item() == 0.0 and bias[1].item() == pytest.approx(7.0)
    assert weight[2, 0].item() == 0.0 and bias[2].item() == 0.0
    # in normalised coordinates z = (x − μ)/s with μ = 1, s = 2: w_z = (C/s² + α)⁻¹ c/s = (0.5 + 1)⁻¹ · 1 = 2/3,
    # c0 = ȳ − w_z (x̄ − μ)/s = 1; the prediction at x = 2 (z = 0.5) is 4/3
    wz, bz = ridge.solve(torch.tensor([1.0]), 2.0)
    assert wz[0, 0].item() == pytest.approx(2 / 3) and bz[0].item() == pytest.approx(1.0)
    assert (wz[0, 0] * 0.5 + bz[0]).item() == pytest.approx(4 / 3)
    # the centred moments behind the fit: n = 3, x̄ = ȳ = 1, S = C = 2, c = 2; an unobserved route has none
    n, xbar, ybar, scatter, cross = ridge.centred(0)
    assert (n, xbar.item(), ybar, scatter.item(), cross.item()) == pytest.approx((3, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="route 2 has no observation"):
        ridge.centred(2)
    with pytest.raises(ValueError, match="route -1 is not in 0"):
        ridge.centred(-1)


def test_equals_float64_least_squares_with_unpenalised_intercept():
    rng = np.random.default_rng(0)
    n, h, alpha, scale = 40, 5, 3.0, 1.7
    x = rng.normal(size=(n, h)) * 4 + 10
    actions = rng.integers(0, 3, size=n)
    y = x @ rng.normal(size=h) + rng.normal(size=n)
    y[[3, 17]] = np.nan  # unscored copies are left out
    mean = rng.normal(size=h)
    ridge = RidgeRouteValues(hidden_size=h, alpha=alpha)
    ridge.add(RidgeRouteValues.increments(torch.tensor(x), torch.tensor(actions), torch.tensor(y)))
    weight, bias = ridge.solve(torch.tensor(mean), scale)
    for a in range(3):
        rows = (actions == a) & ~np.isnan(y)
        z = (x[rows] - mean) / scale
        design = np.hstack([z, np.ones((rows.sum(), 1))])
        penalty = np.diag([alpha] * h + [0.0])  # the intercept is not penalised
        ref = np.linalg.solve(design.T @ design + penalty, design.T @ y[rows])
        np.testing.assert_allclose(weight[a].numpy(), ref[:h], rtol=1e-9, atol=1e-9)
        assert bias[a].item() == pytest.approx(ref[h], rel=1e-9, abs=1e-9)
    assert ridge.count.tolist() == [float(((actions == a) & ~np.isnan(y)).sum()) for a in range(3)]


def test_batches_in_any_split_or_order_give_the_same_fit_and_state_round_trips():
    torch.manual_seed(0)
    x, actions, y = torch.randn(30, 4), torch.randint(0, 3, (30,)), torch.randn(30)
    whole = RidgeRouteValues(4, 2.0)
    whole.add(RidgeRouteValues.increments(x, actions, y))
    parts = RidgeRouteValues(4, 2.0)
    for idx in (torch.arange(20, 30), torch.arange(0, 7), torch.arange(7, 20)):
        parts.add(RidgeRouteValues.increments(x[idx], actions[idx], y[idx]))
    for a, b in zip(whole.solve(), parts.solve()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    restored = RidgeRouteValues(4, 2.0)
    restored.load_state_dict(parts.state_dict())
    for a, b in zip(parts.solve(), restored.solve()):
        assert torch.equal(a, b)
    # the features' statistics over every scored copy, all routes together (the head's input normalisation)
    n, mean, m2 = parts.feature_stats()
    assert n == 30.0
    torch.testing.assert_close(mean, x.double().mean(0))
    torch.testing.assert_close(m2, ((x.double() - x.double().mean(0)) ** 2).sum(0))
    with pytest.raises(ValueError, match="sum_x.*expected \\(3, 5\\)"):
        RidgeRouteValues(5, 2.0).load_state_dict(parts.state_dict())
    with pytest.raises(ValueError, match="value_ridge_alpha"):
        RidgeRouteValues(4, 0.0)
    with pytest.raises(ValueError, match="0..2"):
        RidgeRouteValues.increments(x[:2], torch.tensor([0, 3]), y[:2])


class _Backbone(torch.nn.Module):
    """Hidden state = a fixed random embedding of the token (one token per prompt)."""

    def __init__(self, hidden: int = 6):
        super().__init__()
        self.embed = torch.nn.Embedding(10, hidden)
        torch.nn.init.normal_(self.embed.weight, std=3.0)

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        return type("Out", (), {"hidden_states": (self.embed(input_ids),)})()


def _ridge_component(alpha: float = 0.5) -> RouterComponent:
    cfg = default_section(
        "router",
        enable=True,
        loss_mode="value",
        route_sampling="stratified",
        entropy_coeff=0.0,
        sup_coeff=0.0,
        value_fit="ridge",
        value_ridge_alpha=alpha,
        input_norm="running",
    )
    return RouterComponent(cfg, hidden_size=6, device="cpu")


def _batch(tokens: list[int], actions: list[int], targets: list[float]) -> TensorDict:
    ids = torch.tensor(tokens).unsqueeze(-1)
    return TensorDict(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.zeros_like(ids),
            "router_action": torch.tensor(actions),
            "router_advantages": torch.zeros(len(tokens)),
            "router_value_target": torch.tensor(targets),
        },
        batch_size=[len(tokens)],
    )


def test_component_update_sets_the_head_to_the_ridge_fit_and_resumes_exactly():
    torch.manual_seed(0)
    backbone = _Backbone()
    component = _ridge_component()
    first = _batch([1, 1, 1, 2, 2, 2, 3, 3, 3], [0, 1, 2] * 3, [-3.0, 1.0, 0.5, -3.0, 4.0, float("nan"), 1.0, 0.0, 0.0])
    second = _batch([4, 4, 4, 1, 1, 1], [2, 0, 1, 1, 2, 0], [2.0, -3.0, 3.0, 1.5, 0.0, -3.0])
    metrics = component.update(backbone, first)
    assert metrics["router/value_ridge_rows"] == 8.0
    assert metrics["router/value_loss"] > 0  # measured before the refit: the zero head against the targets
    state = copy.deepcopy(component.state_dict())  # as saved to disk
    # the step's value metrics are those of the head that routed the batch (the step-1 fit), before its refit
    with torch.no_grad():
        routed = component.logits(backbone, second)
    step_loss = (
        0.5 * (routed.gather(1, second["router_action"][:, None]).squeeze(1) - second["router_value_target"]) ** 2
    )
    assert component.update(backbone, second)["router/value_loss"] == pytest.approx(float(step_loss.mean()), rel=1e-5)
    # the head equals the float64 ridge fit of all 14 scored copies on the features normalised by the mean and RMS
    # of those same 14 copies' features (the NaN-target copy is not an observation)
    x = backbone.embed(torch.cat([first["input_ids"], second["input_ids"]]).squeeze(-1)).detach().double()
    actions = torch.cat([first["router_action"], second["router_action"]])
    y = torch.cat([first["router_value_target"], second["router_value_target"]]).double()
    feats = x[~torch.isnan(y)]
    mean = feats.mean(0)
    scale = float(torch.sqrt(((feats - mean) ** 2).mean(0).mean() + 1e-6))
    reference = RidgeRouteValues(6, 0.5)
    reference.add(RidgeRouteValues.increments(x, actions, y))
    weight, bias = reference.solve(mean, scale)
    torch.testing.assert_close(component.head.net.weight.data, weight.float())
    torch.testing.assert_close(component.head.net.bias.data, bias.float())
    # the routes' values the head now gives are the ridge predictions
    values = component.logits(backbone, second)
    expected = ((x[9:] - mean) / scale) @ weight.T + bias
    torch.testing.assert_close(values, expected.float(), rtol=1e-5, atol=1e-5)
    # resume: the saved state plus the second batch gives the same head
    resumed = _ridge_component()
    resumed.load_state_dict(state)
    resumed.update(backbone, second)
    for name, value in component.head.state_dict().items():
        assert torch.equal(value, resumed.head.state_dict()[name]), name
    # one batch holding both gives the same head (up to float32 rounding of the stored layer)
    together = _ridge_component()
    together.update(backbone, torch.cat([first, second]))
    for name, value in component.head.state_dict().items():
        torch.testing.assert_close(value, together.head.state_dict()[name], rtol=1e-5, atol=1e-6)
    del state["ridge"]
    with pytest.raises(ValueError, match="no ridge statistics"):
        _ridge_component().load_state_dict(state)


def test_controller_ridge_adds_no_running_baseline(tokenizer):
    from verl.router.controller import RouterController

    cfg = default_section(
        "router",
        enable=True,
        loss_mode="value",
        route_sampling="stratified",
        entropy_coeff=0.0,
        sup_coeff=0.0,
        value_fit="ridge",
    )
    ctrl = RouterController(cfg, default_section("data", max_prompt_length=64), tokenizer)
    ctrl.route_values.reward = torch.tensor([-3.0, 1.0, 0.5], dtype=torch.float64)
    ctrl.route_values.cost = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    ctrl.lagrange.value = 2.0
    h = torch.tensor([[-2.0, 3.0, 1.0]])
    # z = (h − λ·c̄)/τ with τ = 1: b is not added (the ridge head's intercept already holds each route's mean)
    torch.testing.assert_close(ctrl.policy_logits(h), torch.tensor([[-2.0, 1.0, -1.0]]))
    assert torch.equal(ctrl.value_baseline(), torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["router.value_fit=ridge"], "needs router.loss_mode=value"),
        (
            ["router.loss_mode=value", "router.value_fit=ridge", "router.input_norm=running", "router.head=mlp"],
            "router.head=linear",
        ),
        (["router.loss_mode=value", "router.value_fit=ridge", "router.input_norm=none"], "router.input_norm=running"),
        (
            [
                "router.loss_mode=value",
                "router.value_fit=ridge",
                "router.input_norm=running",
                "router.value_ridge_alpha=0",
            ],
            "value_ridge_alpha",
        ),
        (["router.loss_mode=value", "router.value_fit=lstsq"], "router.value_fit must be one of"),
    ],
)
def test_ridge_config_checks_name_the_key(overrides, message):
    base = [
        "router.enable=true",
        "router.route_sampling=stratified",
        "actor_rollout_ref.rollout.n=3",
        "router.entropy_coeff=0",
        "router.sup_coeff=0",
    ]
    config = load_default_config(base + overrides)
    with pytest.raises(ConfigError, match=message):
        validate_router_settings(config)
