"""KL penalties between the policy and the reference policy, and the controllers of the in-reward KL coefficient
(upstream verl's names; also importable from ``core_algos``).
"""

from __future__ import annotations

from typing import Any, Dict, Union

import numpy as np
import torch

import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.registry import cfg_get

_KL_ALIASES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference from sampled-token log-probs (no ``+`` handling).

    Source: Schulman 2020, "Approximating KL Divergence" (k1, k2, k3); with ``d = logprob - ref_logprob``:
    ``kl``/``k1``: ``d``; ``abs``: ``|d|``; ``mse``/``k2``: ``d^2 / 2``; ``low_var_kl``/``k3``:
    ``exp(-d) + d - 1`` with ``-d`` clamped to ±20 and the result to ±10 (upstream's guards).

    Raises ValueError: unknown estimator (``full`` is not supported: it needs full distributions).
    """
    kind = _KL_ALIASES.get(kl_penalty)
    if kind is None:
        raise ValueError(f"unknown kl_penalty {kl_penalty!r}: kl|k1, abs, mse|k2, low_var_kl|k3 (optionally + '+')")
    diff = logprob - ref_logprob
    if kind == "k1":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "k2":
        return 0.5 * diff.square()
    neg = torch.clamp(-diff, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(neg) - neg - 1.0, min=-10.0, max=10.0)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate (see :func:`kl_penalty_forward`), ``[B, L]`` in, ``[B, L]`` out (unmasked).

    A ``+`` suffix (``k3+``, ``low_var_kl+``, ``k1+``...) makes it straight-through: the value of the named estimator
    with the gradient of k2 (``d^2 / 2``), whose expectation is the gradient of the true KL (upstream verl's trick).
    Raises ValueError: unknown estimator.
    """
    straight_through = kl_penalty.endswith("+")
    base = kl_penalty[:-1] if straight_through else kl_penalty
    value = kl_penalty_forward(logprob, ref_logprob, base)
    if not straight_through or _KL_ALIASES[base] == "k2":
        return value
    k2 = 0.5 * (logprob - ref_logprob).square()
    return k2 - k2.detach() + value.detach()


class FixedKLController:
    """Constant KL coefficient ``value`` (Ziegler et al. 2019, fixed beta)."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op."""

    def state_dict(self) -> Dict[str, float]:
        """``{"value": beta}`` for checkpoints."""
        return {"value": self.value}

    def load_state_dict(self, state: Dict[str, float]) -> None:
        """Restore ``value`` from :meth:`state_dict`."""
        self.value = float(state["value"])


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences" §2.2).

    ``update(kl, n)``: ``value *= 1 + clip(kl / target_kl - 1, -0.2, 0.2) * n / horizon``.

    Raises ValueError: ``horizon <= 0`` or ``target_kl <= 0``.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if horizon <= 0:
            raise ValueError(f"adaptive KL controller needs horizon > 0, got {horizon}")
        if target_kl <= 0:
            raise ValueError(f"adaptive KL controller needs target_kl > 0, got {target_kl}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move ``value`` towards keeping ``current_kl`` at ``target_kl``; ``n_steps`` samples since the last update."""
        error = float(np.clip(float(current_kl) / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> Dict[str, float]:
        """``{"value", "target", "horizon"}`` for checkpoints."""
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: Dict[str, float]) -> None:
        """Restore from :meth:`state_dict` (``target``/``horizon`` optional)."""
        self.value = float(state["value"])
        self.target = float(state.get("target", self.target))
        self.horizon = int(state.get("horizon", self.horizon))


def get_kl_controller(kl_ctrl: Any) -> Union[FixedKLController, AdaptiveKLController]:
    """Build the controller of ``algorithm.kl_ctrl``: ``type`` (fixed), ``kl_coef`` (0.001), ``horizon`` (10000),
    ``target_kl`` (0.1).

    Raises ValueError: unknown ``type``; invalid adaptive settings.
    """
    kind = cfg_get(kl_ctrl, "type", "fixed")
    coef = float(cfg_get(kl_ctrl, "kl_coef", 0.001))
    if kind == "fixed":
        return FixedKLController(kl_coef=coef)
    if kind == "adaptive":
        return AdaptiveKLController(
            init_kl_coef=coef,
            target_kl=float(cfg_get(kl_ctrl, "target_kl", 0.1)),
            horizon=int(cfg_get(kl_ctrl, "horizon", 10000)),
        )
    raise ValueError(f"unknown kl_ctrl.type {kind!r}: fixed or adaptive")


_token_kl = kl_penalty  # apply_kl_penalty's argument shadows the function's name


def apply_kl_penalty(data, kl_ctrl, kl_penalty: str = "kl"):
    """``token_level_rewards = token_level_scores − β·KL(old ‖ ref)`` per response token of the ``DataProto``
    ``data``, then update ``kl_ctrl``; returns ``(data, metrics)`` (also importable from ``ray_trainer``, upstream's
    home of this function).

    Source: Ziegler et al. 2019 (reward with a per-token KL penalty; adaptive β); verl's ``apply_kl_penalty``.
    The controller is updated with the batch mean of the per-sequence mean KL and the batch size.
    """
    response_mask = data.batch["response_mask"]
    kld = _token_kl(data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty) * response_mask
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = data.batch["token_level_scores"] - beta * kld
    current_kl = verl_F.masked_mean(kld, response_mask, axis=-1).mean().item()
    kl_ctrl.update(current_kl=current_kl, n_steps=len(data))
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
