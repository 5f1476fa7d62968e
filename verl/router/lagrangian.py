"""The Lagrange multiplier of the router's cost budget (spec "Lagrangian budget"; seed §4.3).

Constrained problem: maximise ``E[r_task]`` subject to ``E[cost] <= B``. The router is trained on the Lagrangian reward
``r_router = r_task - λ·cost`` (:func:`verl.router.loss.compute_router_rewards`) and ``λ`` follows projected dual
ascent every ``update_freq`` steps::

    λ ← clip(λ + η·(mean_cost − B), 0, λ_max)

where ``mean_cost`` is the mean of the per-step batch mean costs observed since the previous dual update (with
``update_freq = 1``: this step's batch mean, exactly the spec's ``mean_batch(cost)``).

With a proportional gain ``K_P = router.dual_kp > 0`` the multiplier is the PI Lagrangian of Stooke, Achiam and Abbeel
2020 ("Responsive Safety in Reinforcement Learning by PID Lagrangian Methods", arXiv 2007.03964, Algorithm 2, without
the derivative term): the dual ascent above becomes the integral term ``I`` and ::

    λ = clip(I + K_P·(mean_cost − B), 0, λ_max)

so an overshoot of the budget (either way) moves ``λ`` at once instead of only through the accumulated error, which
damps the oscillation of the cost around ``B``. ``K_P = 0`` (default) is plain dual ascent (``λ = I``).

Per training step the trainer (1) computes the router rewards with the current ``λ`` (:attr:`value`), then (2) calls
:meth:`LagrangeMultiplier.update` with the batch's mean cost. Everything that influences later values of ``λ`` is in
:meth:`state_dict`, so a resumed run continues the exact trajectory.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Optional

logger = logging.getLogger(__name__)


def dual_ascent_step(lam: float, mean_cost: float, budget: float, dual_lr: float, lambda_max: float) -> float:
    """One projected dual-ascent step: ``clip(lam + dual_lr·(mean_cost − budget), 0, lambda_max)`` (spec)."""
    return min(max(lam + dual_lr * (mean_cost - budget), 0.0), lambda_max)


class LagrangeMultiplier:
    """Scalar ``λ >= 0`` for the tool-cost budget, with running averages for monitoring and checkpointing.

    Args:
        budget: ``B`` (``router.budget_B``), the allowed average cost per trajectory.
        lambda_init: initial ``λ`` (``router.lambda_init``, 0.0).
        dual_lr: ``η`` (``router.dual_lr``, 0.05).
        lambda_max: upper clamp (``router.lambda_max``, 10.0).
        update_freq: dual update every this many steps (``router.dual_update_freq``, 1): at steps with
            ``step % update_freq == 0``.
        kp: proportional gain ``K_P`` (``router.dual_kp``, 0.0: plain dual ascent).
        avg_decay: decay of the exponential running averages of cost and task reward (logged only; the first
            observation initialises them).

    Raises:
        ValueError: a non-finite value, ``budget < 0``, ``dual_lr < 0``, ``lambda_max < 0``, ``lambda_init`` outside
            ``[0, lambda_max]``, ``update_freq < 1`` or ``avg_decay`` outside ``[0, 1)``.
    """

    def __init__(
        self,
        budget: float,
        lambda_init: float = 0.0,
        dual_lr: float = 0.05,
        lambda_max: float = 10.0,
        update_freq: int = 1,
        avg_decay: float = 0.9,
        kp: float = 0.0,
    ):
        for name, v in (
            ("budget_B", budget),
            ("lambda_init", lambda_init),
            ("dual_lr", dual_lr),
            ("lambda_max", lambda_max),
            ("avg_decay", avg_decay),
            ("dual_kp", kp),
        ):
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"router.{name} must be a finite number, got {v!r}")
        if budget < 0 or dual_lr < 0 or lambda_max < 0 or kp < 0:
            raise ValueError(
                f"router.budget_B, dual_lr, lambda_max and dual_kp must be >= 0, got {budget}, {dual_lr}, "
                f"{lambda_max}, {kp}"
            )
        if not 0.0 <= lambda_init <= lambda_max:
            raise ValueError(f"router.lambda_init must lie in [0, lambda_max={lambda_max}], got {lambda_init}")
        if int(update_freq) != update_freq or update_freq < 1:
            raise ValueError(f"router.dual_update_freq must be an int >= 1, got {update_freq!r}")
        if not 0.0 <= avg_decay < 1.0:
            raise ValueError(f"avg_decay must lie in [0, 1), got {avg_decay}")
        self.budget = float(budget)
        self.dual_lr = float(dual_lr)
        self.lambda_max = float(lambda_max)
        self.update_freq = int(update_freq)
        self.avg_decay = float(avg_decay)
        self.kp = float(kp)
        self.value = float(lambda_init)  # λ, the price of the cost
        self.integral = float(lambda_init)  # I, the dual-ascent (integral) term; equals λ when kp = 0
        self.last_update_step: Optional[int] = None
        self.num_updates = 0
        self.running_cost: Optional[float] = None
        self.running_reward: Optional[float] = None
        self._window_cost_sum = 0.0
        self._window_steps = 0

    @classmethod
    def from_config(cls, router_config: Any) -> "LagrangeMultiplier":
        """Build from the typed ``router`` section (``budget_B``, ``lambda_init``, ``dual_lr``, ``lambda_max``,
        ``dual_update_freq``; their defaults are ``ppo_trainer.yaml``'s, and a missing or ill-typed value is refused
        when the config is loaded)."""
        return cls(
            budget=float(router_config.budget_B),
            lambda_init=float(router_config.lambda_init),
            dual_lr=float(router_config.dual_lr),
            lambda_max=float(router_config.lambda_max),
            update_freq=int(router_config.dual_update_freq),
            kp=float(router_config.dual_kp),
        )

    def _ema(self, old: Optional[float], new: float) -> float:
        return new if old is None else self.avg_decay * old + (1.0 - self.avg_decay) * new

    def update(self, mean_cost: float, step: int, mean_reward: Optional[float] = None) -> dict[str, float]:
        """Record this step's batch mean cost (and mean task reward) and, on dual-update steps, move ``λ``.

        Args:
            mean_cost: mean tool cost of this step's batch.
            step: the trainer's global step (1, 2, ...).
            mean_reward: mean task reward of the batch (running average only), optional.

        Returns:
            metrics: ``router/lambda`` (after this call), ``router/budget``, ``router/dual_updated`` (0/1),
            ``router/running_cost`` and ``router/running_task_reward`` (when known).

        Raises:
            ValueError: a non-finite ``mean_cost`` / ``mean_reward``, or a ``step`` not after the last dual update.
        """
        mean_cost = float(mean_cost)
        if not math.isfinite(mean_cost):
            raise ValueError(f"LagrangeMultiplier.update: mean_cost must be finite, got {mean_cost}")
        if self.last_update_step is not None and step <= self.last_update_step:
            raise ValueError(
                f"LagrangeMultiplier.update: step {step} is not after the last dual update "
                f"(step {self.last_update_step})"
            )
        self.running_cost = self._ema(self.running_cost, mean_cost)
        if mean_reward is not None:
            mean_reward = float(mean_reward)
            if not math.isfinite(mean_reward):
                raise ValueError(f"LagrangeMultiplier.update: mean_reward must be finite, got {mean_reward}")
            self.running_reward = self._ema(self.running_reward, mean_reward)
        self._window_cost_sum += mean_cost
        self._window_steps += 1
        updated = step % self.update_freq == 0
        if updated:
            window_mean = self._window_cost_sum / self._window_steps
            self.integral = dual_ascent_step(self.integral, window_mean, self.budget, self.dual_lr, self.lambda_max)
            self.value = min(max(self.integral + self.kp * (window_mean - self.budget), 0.0), self.lambda_max)
            self.last_update_step = int(step)
            self.num_updates += 1
            self._window_cost_sum, self._window_steps = 0.0, 0
            logger.debug("router dual update at step %d: mean cost %.4f, lambda %.4f", step, window_mean, self.value)
        metrics = {
            "router/lambda": self.value,
            "router/budget": self.budget,
            "router/dual_updated": float(updated),
            "router/running_cost": self.running_cost,
        }
        if self.running_reward is not None:
            metrics["router/running_task_reward"] = self.running_reward
        if self.kp:
            metrics["router/lambda_integral"] = self.integral
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume the exact ``λ`` trajectory (plain Python values, JSON-serialisable)."""
        return {
            "lambda": self.value,
            "integral": self.integral,
            "last_update_step": self.last_update_step,
            "num_updates": self.num_updates,
            "running_cost": self.running_cost,
            "running_reward": self.running_reward,
            "window_cost_sum": self._window_cost_sum,
            "window_steps": self._window_steps,
            "budget": self.budget,
            "dual_lr": self.dual_lr,
            "lambda_max": self.lambda_max,
            "update_freq": self.update_freq,
            "avg_decay": self.avg_decay,
            "dual_kp": self.kp,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the dynamic state saved by :meth:`state_dict`. The hyper-parameters come from the current config;
        a difference from the saved ones is logged (changing the budget on resume is allowed).

        Raises:
            ValueError: a required key is missing (named).
        """
        for key in ("lambda", "last_update_step", "running_cost", "running_reward", "window_cost_sum", "window_steps"):
            if key not in state:
                raise ValueError(f"router Lagrangian state: missing key {key!r}")
        for key, current in (
            ("budget", self.budget),
            ("dual_lr", self.dual_lr),
            ("lambda_max", self.lambda_max),
            ("update_freq", self.update_freq),
            ("dual_kp", self.kp),
        ):
            if key in state and state[key] != current:
                logger.warning(
                    "router Lagrangian: checkpoint has %s=%s, config has %s; using the config", key, state[key], current
                )
        self.value = min(float(state["lambda"]), self.lambda_max)
        # checkpoints from before the PI Lagrangian hold no integral term: it was λ itself
        self.integral = min(float(state.get("integral", state["lambda"])), self.lambda_max)
        self.last_update_step = None if state["last_update_step"] is None else int(state["last_update_step"])
        self.num_updates = int(state.get("num_updates", 0))
        self.running_cost = None if state["running_cost"] is None else float(state["running_cost"])
        self.running_reward = None if state["running_reward"] is None else float(state["running_reward"])
        self._window_cost_sum = float(state["window_cost_sum"])
        self._window_steps = int(state["window_steps"])
