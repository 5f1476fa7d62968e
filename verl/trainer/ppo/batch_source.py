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
values, advantage, updates — is the same for every source. A source sees the trainer only through :class:`StepOps`:
the timed phases, generation, scoring, balancing and the step's counters, nothing else of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.dynamic_sampling import collect_filtered
from verl.trainer.ppo.overlong import apply_overlong_shaping


class BatchSource(Protocol):
    """What the trainer's step asks for: a scored batch for one data-loader batch (``prompts``: prompt rows, or task
    seeds in agent mode), ``n`` samples per prompt; ``metrics`` is updated in place."""

    def collect(self, prompts: DataProto, n: int, metrics: dict) -> DataProto: ...


@dataclass(frozen=True)
class StepOps:
    """All a batch source may use of the trainer (``RayPPOTrainer.step_ops`` builds it).

    Handles: ``config`` (the run's), ``tokenizer``, ``router`` (``verl.router.controller.RouterController`` or None),
    ``rlvcr`` (RLVCR's phase on RLLA rows, or None), ``agent`` (the multi-turn rollout, or None).

    Operations (each the trainer's own, at the current step):

    - ``phase(name)``: a context manager timing ``timing_s/<name>`` and naming the phase in error messages;
    - ``generate(batch)``: pop the prompt tensors of ``batch`` ([B, P], left-padded), roll out with the training
      sampling settings, union the responses back; ``rollout(gen_batch, do_sample)``: the rollout alone;
    - ``score(batch)``: the training reward manager on ``batch``: ``token_level_scores`` ([B, R] float32),
      ``reward_valid`` stored in it; returns the manager's metrics;
    - ``balance(batch, metrics)``: reorder rows in place so every worker gets about the same number of tokens;
    - ``greedy_baseline(batch)``: ReMax's baseline, one greedy rollout's reward per prompt, [B] float32;
    - ``compute_log_prob(batch)``: the actor's log-probs (RLVCR's alternative thinks);
    - ``worker_group()``: the actor worker group (the router head's logits);
    - ``step()``: the global step being trained; ``next_batch()``: the epoch's next data-loader batch (counted as
      consumed, so a resume skips it), or None when the epoch's data ran out (DAPO's dynamic sampling).
    """

    config: Any
    tokenizer: Any
    router: Any
    rlvcr: Any
    agent: Any
    phase: Callable[[str], AbstractContextManager]
    generate: Callable[[DataProto], DataProto]
    rollout: Callable[[DataProto, bool], DataProto]
    score: Callable[[DataProto], dict]
    balance: Callable[[DataProto, dict], None]
    greedy_baseline: Callable[[DataProto], torch.Tensor]
    compute_log_prob: Callable[[DataProto], DataProto]
    worker_group: Callable[[], Any]
    step: Callable[[], int]
    next_batch: Callable[[], dict | None]


def _finish(ops: StepOps, batch: DataProto, metrics: dict) -> None:
    """Balance the rows across workers (``trainer.balance_batch``) and record ``global_token_num``."""
    if ops.config.trainer.balance_batch:
        ops.balance(batch, metrics)
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()


class SingleTurnSource:
    """One response per copy of each prompt (module docstring)."""

    def __init__(self, ops: StepOps):
        self.ops = ops

    def collect(self, prompts: DataProto, n: int, metrics: dict) -> DataProto:
        batch = self.collect_once(prompts, n, metrics)
        if self.ops.config.algorithm.filter_groups.enable:  # DAPO: only groups whose rewards differ
            batch = collect_filtered(self.ops, batch, n, metrics, self.collect_once)
        return batch

    def collect_once(self, batch: DataProto, n: int, metrics: dict) -> DataProto:
        """One generation batch: ``n`` routed (or repeated) copies of each prompt, generated and scored."""
        ops, config = self.ops, self.ops.config
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        baseline = None
        if core_algos.get_estimator_plugin(config.algorithm.adv_estimator).needs_greedy_baseline:  # ReMax
            with ops.phase("gen_max"):
                baseline = ops.greedy_baseline(batch)
        if ops.router is not None:
            with ops.phase("router"):
                batch = ops.router.expand(batch, n, validate=False, worker_group=ops.worker_group())
        else:
            batch = batch.repeat(repeat_times=n, interleave=True)
        with ops.phase("gen"):
            batch = ops.generate(batch)
        metrics.update(batch.meta_info.pop("rollout_metrics", {}))  # multi-turn: tool_loop/*, tool/*
        if baseline is not None:
            batch.batch["reward_baselines"] = baseline.repeat_interleave(n)
        _finish(ops, batch, metrics)
        with ops.phase("reward"):
            metrics.update(ops.score(batch))
            metrics.update(apply_overlong_shaping(batch, config, ops.tokenizer.eos_token_id))  # DAPO, when on
            if ops.router is not None:
                metrics.update(ops.router.score(batch, ops.step()))
        if config.trainer.rollout_data_dir:  # verl's key: this step's rollouts as <dir>/<step>.jsonl
            from verl.trainer.ppo.rollout_dump import dump_rollouts

            dump_rollouts(batch, ops.tokenizer, ops.step(), config.trainer.rollout_data_dir)
        if ops.rlvcr is not None:  # after the reward (only_positive_episodes reads it), before the advantage
            with ops.phase("rlvcr"):
                metrics.update(ops.rlvcr(batch, lambda gen: ops.rollout(gen, True), ops.compute_log_prob))
        return batch


class AgentEnvSource:
    """Multi-turn episodes on ``env.env_name`` for the batch's task seeds (module docstring); ``n`` is the group size
    the agent rollout already holds (``env.rollout.n``)."""

    def __init__(self, ops: StepOps):
        self.ops = ops

    def collect(self, prompts: DataProto, n: int, metrics: dict) -> DataProto:
        from agent_system.multi_turn_rollout.agent_rollout import pad_rows_to_multiple, update_row_multiple

        ops = self.ops
        do_sample = ops.config.actor_rollout_ref.rollout.do_sample
        with ops.phase("gen"):
            batch, env_metrics = ops.agent.collect(
                prompts.non_tensor_batch["task_seed"],
                lambda gen: ops.rollout(gen, do_sample),
                log_prob_fn=ops.compute_log_prob,  # RLVCR phase (timing_s/rlvcr, within gen)
                step=ops.step(),
            )
        metrics.update(env_metrics)
        batch = pad_rows_to_multiple(batch, update_row_multiple(ops.config), ops.agent.pad_token_id)
        _finish(ops, batch, metrics)
        return batch


def make_batch_source(ops: StepOps) -> BatchSource:
    """:class:`AgentEnvSource` when the run has an agent rollout (``env.env_name``), else :class:`SingleTurnSource`."""
    return AgentEnvSource(ops) if ops.agent is not None else SingleTurnSource(ops)
