"""Where a training step's batch comes from: one interface, ``collect(prompts, n, metrics) -> DataProto``.

``RayPPOTrainer`` holds one source, chosen once from the config (:func:`make_batch_source`), and its step reads
``batch = self.batch_source.collect(prompts, n, metrics)`` whatever the setting:

- :class:`SingleTurnSource` (ToolRL's setting): ``n`` responses per prompt — routed first when the router is on
  (``verl/router/controller.py``) — scored by the reward manager, with DAPO's overlong shaping when on; ReMax adds its
  greedy baseline; DAPO's dynamic sampling (``algorithm.filter_groups``) draws more generation batches
  (``dynamic_sampling.collect_filtered``); RLVCR's phase (alternative thinks on RLLA rows) runs on top, after the
  reward and before the advantage.
- :class:`AgentEnvSource` (``env.env_name`` set): multi-turn episodes in the agent environments
  (``agent_system.multi_turn_rollout``), one row per agent step, scored by the environments (or a trajectory reward),
  padded with inert rows to a multiple of the mini-batch; RLVCR's phase runs inside that rollout.

Both return scored rows (``responses``, ``response_mask``, ``token_level_scores``, ``uid``; ``global_token_num`` in
``meta_info``), balanced across workers when ``trainer.balance_batch``. What follows — old log-probs, reference,
values, advantage, updates — is the same for every source. The sources run inside the trainer's timed phases and use
its generation (``_generate`` / ``_rollout``), scoring (``_score``) and worker groups.
"""
from __future__ import annotations

import uuid
from typing import Any, Protocol

import numpy as np

from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.dynamic_sampling import collect_filtered
from verl.trainer.ppo.overlong import apply_overlong_shaping


class BatchSource(Protocol):
    """What the trainer's step asks for: a scored batch for one data-loader batch (``prompts``: prompt rows, or task
    seeds in agent mode), ``n`` samples per prompt; ``metrics`` is updated in place."""

    def collect(self, prompts: DataProto, n: int, metrics: dict) -> DataProto: ...


class SingleTurnSource:
    """One response per copy of each prompt (module docstring). ``trainer``: the ``RayPPOTrainer``."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def collect(self, prompts: DataProto, n: int, metrics: dict) -> DataProto:
        batch = self.collect_once(prompts, n, metrics)
        if self.trainer.config.algorithm.filter_groups.enable:  # DAPO: only groups whose rewards differ
            batch = collect_filtered(self.trainer, batch, n, metrics, self.trainer.epoch_batches, self.collect_once)
        return batch

    def collect_once(self, batch: DataProto, n: int, metrics: dict) -> DataProto:
        """One generation batch: ``n`` routed (or repeated) copies of each prompt, generated and scored."""
        trainer, config = self.trainer, self.trainer.config
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        baseline = None
        if core_algos.get_estimator_plugin(config.algorithm.adv_estimator).needs_greedy_baseline:  # ReMax
            with trainer._phase("gen_max"):
                baseline = trainer._greedy_baseline(batch)
        if trainer.router is not None:
            with trainer._phase("router"):
                batch = trainer.router.expand(batch, n, validate=False, worker_group=trainer.actor_rollout_wg)
        else:
            batch = batch.repeat(repeat_times=n, interleave=True)
        with trainer._phase("gen"):
            batch = trainer._generate(batch, validate=False)
        if baseline is not None:
            batch.batch["reward_baselines"] = baseline.repeat_interleave(n)
        if config.trainer.balance_batch:
            trainer._balance_batch(batch, metrics)
        batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
        with trainer._phase("reward"):
            metrics.update(trainer._score(batch, trainer.reward_fn, trainer.global_steps))
            metrics.update(apply_overlong_shaping(batch, config, trainer.tokenizer.eos_token_id))  # DAPO, when on
            if trainer.router is not None:
                metrics.update(trainer.router.score(batch, trainer.global_steps))
        if config.trainer.rollout_data_dir:  # verl's key: this step's rollouts as <dir>/<step>.jsonl
            from verl.trainer.ppo.rollout_dump import dump_rollouts

            dump_rollouts(batch, trainer.tokenizer, trainer.global_steps, config.trainer.rollout_data_dir)
        if trainer.rlvcr is not None:  # after the reward (only_positive_episodes reads it), before the advantage
            with trainer._phase("rlvcr"):
                metrics.update(trainer.rlvcr(batch, lambda gen: trainer._rollout(gen, do_sample=True, validate=False),
                                             trainer.actor_rollout_wg.compute_log_prob))
        return batch


class AgentEnvSource:
    """Multi-turn episodes on ``env.env_name`` for the batch's task seeds (module docstring); ``n`` is the group size
    the agent rollout already holds (``env.rollout.n``). ``trainer``: the ``RayPPOTrainer`` (its ``agent``)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def collect(self, prompts: DataProto, n: int, metrics: dict) -> DataProto:
        from agent_system.multi_turn_rollout.agent_rollout import pad_rows_to_multiple, update_row_multiple

        trainer = self.trainer
        do_sample = trainer.config.actor_rollout_ref.rollout.do_sample
        with trainer._phase("gen"):
            batch, env_metrics = trainer.agent.collect(
                prompts.non_tensor_batch["task_seed"],
                lambda gen: trainer._rollout(gen, do_sample=do_sample, validate=False),
                log_prob_fn=trainer.actor_rollout_wg.compute_log_prob,  # RLVCR phase (timing_s/rlvcr, within gen)
                step=trainer.global_steps)
        metrics.update(env_metrics)
        batch = pad_rows_to_multiple(batch, update_row_multiple(trainer.config), trainer.agent.pad_token_id)
        if trainer.config.trainer.balance_batch:
            trainer._balance_batch(batch, metrics)
        batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
        return batch


def make_batch_source(trainer: Any) -> BatchSource:
    """:class:`AgentEnvSource` when the trainer has an agent rollout (``env.env_name``), else
    :class:`SingleTurnSource`."""
    return AgentEnvSource(trainer) if trainer.agent is not None else SingleTurnSource(trainer)
