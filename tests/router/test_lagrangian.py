"""Dual ascent on lambda: hand-worked sequence, clipping, update_freq, exact resume."""

import json

import pytest

from verl.router.lagrangian import LagrangeMultiplier, dual_ascent_step
from verl.trainer.config_utils import default_section


def test_hand_worked_sequence_with_clipping():
    # B = 0.3, eta = 0.5, lambda_max = 0.4
    lm = LagrangeMultiplier(budget=0.3, lambda_init=0.0, dual_lr=0.5, lambda_max=0.4)
    expected = []
    # step 1: 0 + 0.5*(0.1-0.3) = -0.1 -> clipped to 0
    # step 2: 0 + 0.5*(0.7-0.3) = 0.2
    # step 3: 0.2 + 0.5*(0.9-0.3) = 0.5 -> clipped to 0.4
    # step 4: 0.4 + 0.5*(0.2-0.3) = 0.35
    # step 5: 0.35 + 0.5*(0.0-0.3) = 0.2
    for step, cost, lam in [(1, 0.1, 0.0), (2, 0.7, 0.2), (3, 0.9, 0.4), (4, 0.2, 0.35), (5, 0.0, 0.2)]:
        metrics = lm.update(cost, step)
        expected.append(lam)
        assert metrics["router/lambda"] == pytest.approx(lam, abs=1e-12)
        assert metrics["router/dual_updated"] == 1.0 and metrics["router/budget"] == 0.3
    assert lm.last_update_step == 5 and lm.num_updates == 5
    assert dual_ascent_step(1.0, 5.0, 0.0, 1.0, 3.0) == 3.0


def test_update_freq_uses_the_window_mean():
    lm = LagrangeMultiplier(budget=0.5, dual_lr=1.0, update_freq=2)
    assert lm.update(0.6, 1)["router/dual_updated"] == 0.0 and lm.value == 0.0
    lm.update(1.0, 2)  # window mean 0.8 -> 0 + (0.8 - 0.5) = 0.3
    assert lm.value == pytest.approx(0.3) and lm.last_update_step == 2
    lm.update(0.0, 3)
    assert lm.value == pytest.approx(0.3)
    lm.update(0.2, 4)  # window mean 0.1 -> 0.3 - 0.4 -> 0
    assert lm.value == 0.0
    with pytest.raises(ValueError, match="step 4 is not after"):
        lm.update(0.1, 4)


def test_running_averages():
    lm = LagrangeMultiplier(budget=0.3, avg_decay=0.5)
    lm.update(1.0, 1, mean_reward=2.0)
    m = lm.update(0.0, 2, mean_reward=4.0)
    assert m["router/running_cost"] == pytest.approx(0.5)
    assert m["router/running_task_reward"] == pytest.approx(3.0)


def test_state_round_trip_continues_exact_trajectory():
    costs = [0.9, 0.1, 0.8, 0.75, 0.2, 0.6, 0.95, 0.3, 0.5]
    full = LagrangeMultiplier(budget=0.4, lambda_init=0.1, dual_lr=0.3, lambda_max=1.0, update_freq=2)
    trajectory = [full.update(c, s + 1, mean_reward=c * 2)["router/lambda"] for s, c in enumerate(costs)]
    first = LagrangeMultiplier(budget=0.4, lambda_init=0.1, dual_lr=0.3, lambda_max=1.0, update_freq=2)
    for s, c in enumerate(costs[:5]):  # stop mid-window (step 5 is not a dual-update step)
        first.update(c, s + 1, mean_reward=c * 2)
    state = json.loads(json.dumps(first.state_dict()))  # must survive JSON
    resumed = LagrangeMultiplier(budget=0.4, lambda_init=0.0, dual_lr=0.3, lambda_max=1.0, update_freq=2)
    resumed.load_state_dict(state)
    rest = [resumed.update(c, s + 6, mean_reward=c * 2)["router/lambda"] for s, c in enumerate(costs[5:])]
    assert rest == trajectory[5:]  # exact equality
    assert resumed.state_dict() == full.state_dict()


def test_validation_errors():
    with pytest.raises(ValueError, match="lambda_init"):
        LagrangeMultiplier(budget=0.3, lambda_init=11.0)
    with pytest.raises(ValueError, match="dual_update_freq"):
        LagrangeMultiplier(budget=0.3, update_freq=0)
    with pytest.raises(ValueError, match="router.budget_B must be of type float"):  # refused when loaded
        LagrangeMultiplier.from_config(default_section("router", budget_B=None))
    with pytest.raises(ValueError, match="missing key 'window_steps'"):
        LagrangeMultiplier(budget=0.3).load_state_dict(
            {"lambda": 0.1, "last_update_step": 1, "running_cost": None, "running_reward": None, "window_cost_sum": 0.0}
        )
    lm = LagrangeMultiplier.from_config(default_section("router", budget_B=0.3, dual_update_freq=3, lambda_init=0.5))
    assert (lm.budget, lm.update_freq, lm.value, lm.dual_lr, lm.lambda_max) == (0.3, 3, 0.5, 0.05, 10.0)


def test_pi_lagrangian_hand_worked_and_resumed():
    """router.dual_kp > 0: λ = clip(I + K_P·(cost − B), 0, λ_max) with I the dual-ascent term (Stooke et al. 2020,
    Algorithm 2 without the derivative)."""
    lm = LagrangeMultiplier(budget=0.3, lambda_init=2.0, dual_lr=0.5, lambda_max=10.0, kp=4.0)
    # step 1: I = 2 + 0.5·0.4 = 2.2, λ = 2.2 + 4·0.4 = 3.8
    # step 2: I = 2.2 + 0.5·(−0.2) = 2.1, λ = 2.1 + 4·(−0.2) = 1.3
    # step 3: I = 2.1 − 0.15 = 1.95, λ = 1.95 − 1.2 = 0.75
    # step 4: I = 1.95 − 0.15 = 1.8, λ = 1.8 − 1.2 = 0.6 (cost 0, far below the budget)
    for step, cost, integral, lam in [(1, 0.7, 2.2, 3.8), (2, 0.1, 2.1, 1.3), (3, 0.0, 1.95, 0.75), (4, 0.0, 1.8, 0.6)]:
        metrics = lm.update(cost, step)
        assert metrics["router/lambda"] == pytest.approx(lam) and lm.value == pytest.approx(lam)
        assert metrics["router/lambda_integral"] == pytest.approx(integral)
    resumed = LagrangeMultiplier(budget=0.3, lambda_init=0.0, dual_lr=0.5, kp=4.0)
    resumed.load_state_dict(json.loads(json.dumps(lm.state_dict())))
    assert resumed.update(0.3, 5)["router/lambda"] == lm.update(0.3, 5)["router/lambda"] == pytest.approx(1.8)
    # the projection at 0: a large undershoot cannot make λ negative
    low = LagrangeMultiplier(budget=0.5, lambda_init=0.1, dual_lr=0.1, kp=10.0)
    assert low.update(0.0, 1)["router/lambda"] == 0.0 and low.integral == pytest.approx(0.05)
    with pytest.raises(ValueError, match="dual_kp"):
        LagrangeMultiplier(budget=0.3, kp=-1.0)


def test_a_checkpoint_from_before_the_pi_term_resumes_with_its_lambda_as_the_integral():
    old_state = LagrangeMultiplier(budget=0.3, lambda_init=3.0).state_dict()
    old_state.pop("integral")
    old_state.pop("dual_kp")
    lm = LagrangeMultiplier(budget=0.3, dual_lr=0.5, kp=4.0)
    lm.load_state_dict(old_state)
    assert lm.integral == lm.value == 3.0
    # the next step: I = 3 + 0.5·(0.1 − 0.3) = 2.9, λ = 2.9 + 4·(−0.2) = 2.1
    assert lm.update(0.1, 1)["router/lambda"] == pytest.approx(2.1)
