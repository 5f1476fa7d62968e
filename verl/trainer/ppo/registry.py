"""Registries of the advantage estimators and policy losses, and the config lookup every estimator shares.

Estimators are pure tensor functions registered by name (``algorithm.adv_estimator``) with :func:`register_adv_est`;
the calling convention is in :mod:`verl.trainer.ppo.core_algos`' docstring. The built-in estimators register in
``core_algos``; GiGPO (:mod:`verl.trainer.ppo.gigpo`) and RLVCR (:mod:`rlvcr.core_rlvcr`) register themselves, with
the group statistics of :mod:`verl.trainer.ppo.group_stats`, and ``core_algos`` imports them so that importing it
gives every estimator. Nothing here imports an estimator, so a plug-in can import this module without a cycle.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Dict, Optional, Tuple, Union

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "POLICY_LOSS_REGISTRY",
    "AdvantageEstimator",
    "EstimatorPlugin",
    "accepts_eos_mask",
    "cfg_get",
    "get_adv_estimator_fn",
    "get_estimator_plugin",
    "get_policy_loss_fn",
    "policy_loss_mode",
    "register_adv_est",
    "register_policy_loss",
    "resolve",
]


def cfg_get(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` for a dict/DictConfig, ``config.key`` for an object; ``default`` when missing or None."""
    if config is None:
        return default
    if hasattr(config, "get") and callable(config.get):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value


def resolve(explicit: Any, config: Any, key: str, default: Any) -> Any:
    """``explicit`` when given, else ``config[key]``, else ``default`` (explicit arguments win over the config)."""
    return explicit if explicit is not None else cfg_get(config, key, default)


class AdvantageEstimator(str, Enum):
    """Names of the advantage estimators (``algorithm.adv_estimator``). ``GIGPO`` lives in
    :mod:`verl.trainer.ppo.gigpo` and ``RLVCR`` in :mod:`rlvcr.core_rlvcr`; both are registered at the end of this
    module."""

    GAE = "gae"
    GRPO = "grpo"
    GRPO_VECTORIZED = "grpo_vectorized"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    RLOO_VECTORIZED = "rloo_vectorized"
    GIGPO = "gigpo"
    RLVCR = "rlvcr"


@dataclass(frozen=True)
class EstimatorPlugin:
    """What an estimator declares beside its function, so that no code outside it compares estimator names.

    Attributes:
        batch_inputs: ``fn(data, metrics) -> dict``: the extra keyword arguments the estimator reads from a batch
            (``data`` a ``DataProto``; ``metrics`` the step's dict, or None), e.g. GiGPO's per-step fields.
        batch_outputs: ``fn(data, inputs, valid) -> None``: writes extra per-row outputs of the estimate into
            ``data`` (``inputs`` as passed to the estimator; ``valid`` the ``reward_valid`` rows or None).
        check_config: ``fn(algorithm_config) -> None``: validates the estimator's own config section at load; raises
            ValueError naming the key.
        grouped: the advantage is relative within the ``index`` groups (``rollout.n > 1`` needed for a signal).
        step_level: rows are agent steps and the estimator reads per-step rewards (agent mode's default
            ``env.reward_mode`` is then ``step``).
        needs_values: reads critic ``values`` (the critic is enabled by default).
        needs_greedy_baseline: reads ``reward_baselines``, the reward of a greedy rollout per prompt (ReMax).
    """

    batch_inputs: Optional[Callable[[Any, Optional[dict]], dict]] = None
    batch_outputs: Optional[Callable[[Any, dict, Any], None]] = None
    check_config: Optional[Callable[[Any], None]] = None
    grouped: bool = False
    step_level: bool = False
    needs_values: bool = False
    needs_greedy_baseline: bool = False


ADV_ESTIMATOR_REGISTRY: Dict[str, Callable] = {}
ESTIMATOR_PLUGINS: Dict[str, EstimatorPlugin] = {}
POLICY_LOSS_REGISTRY: Dict[str, Callable] = {}

_RESERVED_ELSEWHERE = {"gigpo": "verl.trainer.ppo.gigpo (or core_algos)", "rlvcr": "rlvcr.core_rlvcr (or core_algos)"}


def accepts_eos_mask(fn: Callable) -> Callable:
    """Decorator: ``fn`` also takes ``eos_mask=``, ToolRL's (and verl < 0.3's) keyword for what upstream now calls
    ``response_mask`` — the ``[B, L]`` 0/1 mask of the tokens the policy generated — so ToolRL's calls such as
    ``compute_grpo_outcome_advantage(token_level_rewards=r, eos_mask=m, index=i)`` run unchanged, with a
    ``DeprecationWarning`` naming the new keyword.

    Raises:
        TypeError: both ``eos_mask`` and ``response_mask`` are given.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "eos_mask" in kwargs:
            if "response_mask" in kwargs:
                raise TypeError(f"{fn.__name__}: got response_mask and its old name eos_mask; pass response_mask only")
            warnings.warn(
                f"{fn.__name__}(eos_mask=...): the keyword is response_mask (eos_mask is ToolRL's old name)",
                DeprecationWarning,
                stacklevel=2,
            )
            kwargs["response_mask"] = kwargs.pop("eos_mask")
        return fn(*args, **kwargs)

    return wrapper


def _name_of(name_or_enum: Union[str, Enum]) -> str:
    return name_or_enum.value if isinstance(name_or_enum, Enum) else str(name_or_enum)


def _fn_key(fn: Callable) -> Tuple[str, str]:
    return getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn))


def register_adv_est(
    name_or_enum: Union[str, AdvantageEstimator], plugin: Optional[EstimatorPlugin] = None
) -> Callable[[Callable], Callable]:
    """Decorator registering an advantage estimator under ``name_or_enum`` (module docstring: calling convention),
    with what it declares about itself (:class:`EstimatorPlugin`; None: nothing beyond the common inputs).

    Re-registering the same function is a no-op (module reloads).

    Raises ValueError: the name is already registered to a different function.
    """

    def decorator(fn: Callable) -> Callable:
        name = _name_of(name_or_enum)
        existing = ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is not None and _fn_key(existing) != _fn_key(fn):
            raise ValueError(f"advantage estimator {name!r} is already registered to {existing!r}")
        ADV_ESTIMATOR_REGISTRY[name] = fn
        ESTIMATOR_PLUGINS[name] = plugin or EstimatorPlugin()
        return fn

    return decorator


def get_adv_estimator_fn(name_or_enum: Union[str, AdvantageEstimator]) -> Callable:
    """The estimator registered under ``name_or_enum``.

    Raises:
        ValueError: unknown name; the message lists the registered names (and, for a reserved name such as
        ``rlvcr``, the module that registers it).
    """
    name = _name_of(name_or_enum)
    if name not in ADV_ESTIMATOR_REGISTRY:
        where = _RESERVED_ELSEWHERE.get(name)
        hint = f"; {name!r} is registered when {where} is imported" if where else ""
        raise ValueError(f"unknown advantage estimator {name!r}; registered: {sorted(ADV_ESTIMATOR_REGISTRY)}{hint}")
    return ADV_ESTIMATOR_REGISTRY[name]


def get_estimator_plugin(name_or_enum: Union[str, AdvantageEstimator]) -> EstimatorPlugin:
    """The :class:`EstimatorPlugin` of a registered estimator.

    Raises:
        ValueError: unknown name (as :func:`get_adv_estimator_fn`).
    """
    get_adv_estimator_fn(name_or_enum)
    return ESTIMATOR_PLUGINS[_name_of(name_or_enum)]


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator registering a policy loss ``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
    config, rollout_is_weights) -> (loss, metrics)`` under ``name`` (``actor.policy_loss.loss_mode``)."""

    def decorator(fn: Callable) -> Callable:
        POLICY_LOSS_REGISTRY[name] = fn
        return fn

    return decorator


def get_policy_loss_fn(name: str) -> Callable:
    """The policy loss registered under ``name``.

    Raises ValueError: unknown name (the message lists the registered ones).
    """
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"unknown policy loss {name!r}; registered: {sorted(POLICY_LOSS_REGISTRY)}")
    return POLICY_LOSS_REGISTRY[name]


def policy_loss_mode(config: Any) -> str:
    """``actor.policy_loss.loss_mode`` of a typed ``actor_rollout_ref.actor`` section (verl's key)."""
    return str(config.policy_loss.loss_mode)
