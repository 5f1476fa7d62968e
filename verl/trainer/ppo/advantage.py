"""The advantage stage of a step: the registered estimator named by ``algorithm.adv_estimator`` on a batch.

Every estimator receives the common inputs by name (the calling convention of :mod:`verl.trainer.ppo.core_algos`) plus
what its :class:`~verl.trainer.ppo.registry.EstimatorPlugin` declares (e.g. GiGPO's per-step fields, RLVCR's
per-level entropies): nothing here knows an estimator by name. Rows whose ``reward_valid`` is False are left out of
the estimate and get advantage 0 (:func:`verl.trainer.ppo.group_stats.compute_advantage_on_valid_rows`).
"""

from __future__ import annotations

from typing import Optional

from omegaconf import DictConfig

from verl.protocol import DataProto
from verl.trainer.ppo import core_algos


def compute_advantage(
    data: DataProto, adv_estimator: str, algo_config: DictConfig, metrics: Optional[dict] = None
) -> DataProto:
    """Fill ``advantages`` and ``returns`` [B, R] with the registered estimator ``adv_estimator`` (upstream verl's
    ``ray_trainer.compute_advantage``; this module's docstring).

    Inputs passed by name: ``token_level_rewards``, ``response_mask``, ``index`` (the prompt uid), ``gamma``, ``lam``,
    ``norm_adv_by_std_in_grpo``, ``config`` (the algorithm section), ``values`` / ``reward_baselines`` when the batch
    has them, and the plug-in's ``batch_inputs(data, metrics)``; afterwards its ``batch_outputs`` writes any per-row
    outputs. ``metrics``, when given, receives the estimator's own statistics (``gigpo/*``, ``rlvcr/*``).

    Raises:
        ValueError: unknown estimator, or what the estimator raises for missing inputs (it names them).
    """
    fn = core_algos.get_adv_estimator_fn(adv_estimator)
    plugin = core_algos.get_estimator_plugin(adv_estimator)
    inputs = dict(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        gamma=algo_config.gamma,
        lam=algo_config.lam,
        norm_adv_by_std_in_grpo=algo_config.norm_adv_by_std_in_grpo,
        config=algo_config,
    )
    for key in ("values", "reward_baselines"):
        if key in data.batch.keys():
            inputs[key] = data.batch[key]
    if plugin.batch_inputs is not None:
        inputs.update(plugin.batch_inputs(data, metrics))
    valid = data.non_tensor_batch.get("reward_valid")
    advantages, returns = (
        fn(**inputs) if valid is None else core_algos.compute_advantage_on_valid_rows(fn, valid, **inputs)
    )
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    if plugin.batch_outputs is not None:
        plugin.batch_outputs(data, inputs, valid)
    return data
