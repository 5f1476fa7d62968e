"""The phases between a scored batch and the updates, shared by both schedules: the synchronous trainer
(``RayPPOTrainer._train_step``) and the asynchronous learner (``verl.async_rl.learner.Learner.step``).

Order (upstream verl's): ``old_log_prob`` (the current policy's log-probs, with ``actor/entropy`` and, when the batch
carries the rollout's own log-probs, the rollout correction) → ``ref`` (the reference policy, for the KL loss or the KL
penalty) → ``values`` (the critic) → ``adv`` (the KL penalty into the reward, or the scores as rewards; then the
registered estimator ``algorithm.adv_estimator``, :func:`verl.trainer.ppo.advantage.compute_advantage`).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, ContextManager, Optional

from verl.protocol import DataProto
from verl.trainer.ppo.advantage import compute_advantage
from verl.trainer.ppo.kl import apply_kl_penalty
from verl.trainer.ppo.metric_utils import reduce_metrics
from verl.trainer.ppo.rollout_corr import apply_rollout_correction
from verl.utils.torch_functional import masked_mean

__all__ = ["prepare_update"]


def prepare_update(
    batch: DataProto,
    actor_wg,
    algorithm,
    metrics: dict,
    *,
    needs_old_log_probs: bool = True,
    use_reference_policy: bool = False,
    kl_ctrl_in_reward=None,
    critic_wg=None,
    phase: Optional[Callable[[str], ContextManager]] = None,
) -> DataProto:
    """Add ``old_log_probs``, ``ref_log_prob``, ``values``, ``token_level_rewards``, ``advantages`` and ``returns``
    ([B, R] float32) to a scored batch (module docstring for the order).

    Args:
        batch: the rollout rows (``input_ids``, ``attention_mask``, ``position_ids``, ``responses``,
            ``response_mask``, ``token_level_scores`` [B, R]; non-tensor ``uid``, the group of each row; optional
            ``rollout_log_probs``).
        actor_wg: the actor worker group (``compute_log_prob``, ``compute_ref_log_prob``).
        algorithm: the ``algorithm`` config section.
        metrics: receives ``actor/entropy``, ``rollout_corr/*``, the KL penalty's and the estimator's metrics.
        needs_old_log_probs: False skips the ``old_log_prob`` pass (the synchronous trainer before
            ``trainer.critic_warmup`` with nothing else reading them).
        use_reference_policy: compute ``ref_log_prob``. kl_ctrl_in_reward: the KL controller of the penalty in the
            reward (``algorithm.use_kl_in_reward``), or None. critic_wg: the critic group, or None.
        phase: ``phase(name)`` -> a context manager timing that phase (None: untimed).

    Returns: the batch with the fields added (the input object may be reused).
    Raises: what the workers and the estimator raise (e.g. a missing input, named).
    """
    timed = phase or (lambda name: nullcontext())
    if needs_old_log_probs:
        with timed("old_log_prob"):
            old = actor_wg.compute_log_prob(batch)
            metrics.update(reduce_metrics(old.meta_info.pop("metrics", {})))
            if "entropys" in old.batch.keys():
                metrics["actor/entropy"] = masked_mean(old.batch["entropys"], batch.batch["response_mask"]).item()
                old.batch.pop("entropys")
            batch = batch.union(old)
            metrics.update(apply_rollout_correction(batch, algorithm))  # when the rollout has log-probs
    if use_reference_policy:
        with timed("ref"):
            batch = batch.union(actor_wg.compute_ref_log_prob(batch))
    if critic_wg is not None:
        with timed("values"):
            batch = batch.union(critic_wg.compute_values(batch))
    with timed("adv"):
        if kl_ctrl_in_reward is not None:
            batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl_in_reward, algorithm.kl_penalty)
            metrics.update(kl_metrics)
        else:
            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
        batch = compute_advantage(batch, algorithm.adv_estimator, algorithm, metrics)
    return batch
