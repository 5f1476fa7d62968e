"""Multi-turn agent training inside ``RayPPOTrainer``: what changes when ``env.env_name`` is set.

- Data: a "dataset" of task seeds (:class:`EnvTaskDataset`): ``data.train_batch_size`` tasks per step, drawn by the
  trainer's usual sampler, so epochs, shuffling and checkpoint/resume of the data order work unchanged. Validation
  tasks use their own seeds (``env.val_seed_offset`` + i).
- Generation: :class:`AgentRollout` plays ``train_batch_size × env.rollout.n`` environments with the actor's rollout
  (``TrajectoryCollector``) and returns one training row per active step, already scored (``token_level_scores``).
- Update: rows are padded with inert rows (no response tokens, ``reward_valid=False``) up to a multiple of the
  mini-batch so that the actor's fixed ``ppo_mini_batch_size`` divides a batch whose size depends on how long the
  episodes lasted. An inert row adds nothing to any loss, gradient or group statistic.
Everything else (workers, old/ref log-probs, KL, estimators, checkpoints, logging) is the single-turn trainer's.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from agent_system.environments.manager import EnvironmentManager
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import get_estimator_plugin

logger = logging.getLogger(__name__)


class EnvTaskDataset(torch.utils.data.Dataset):
    """``num_tasks`` task seeds ``offset + i``; item ``i`` is ``{"task_seed": offset + i}``.

    Raises ValueError: ``num_tasks`` < 1.
    """

    def __init__(self, num_tasks: int, offset: int = 0):
        if int(num_tasks) < 1:
            raise ValueError(f"env task dataset needs >= 1 task, got {num_tasks}")
        self.num_tasks, self.offset = int(num_tasks), int(offset)

    def __len__(self) -> int:
        return self.num_tasks

    def __getitem__(self, i: int) -> Dict[str, int]:
        return {"task_seed": self.offset + int(i)}


def task_collate_fn(items) -> Dict[str, np.ndarray]:
    """Batch of task items → ``{"task_seed": int64 [b]}`` (a non-tensor field of the trainer's DataProto)."""
    return {"task_seed": np.array([int(x["task_seed"]) for x in items], dtype=np.int64)}


def pad_rows_to_multiple(batch: DataProto, multiple: int, pad_token_id: int) -> DataProto:
    """Append inert copies of row 0 until ``len(batch) % multiple == 0``.

    An inert row has its response replaced by padding (``responses`` = pad, response part of ``attention_mask`` and
    ``response_mask`` = 0, ``token_level_scores`` = 0), ``reward_valid=False`` (no advantage, excluded from group
    statistics) and ``is_pad=True``; every real row gets ``is_pad=False``.
    """
    batch.non_tensor_batch["is_pad"] = np.zeros(len(batch), dtype=bool)
    missing = (-len(batch)) % int(multiple)
    if missing == 0:
        return batch
    pad = batch[[0] * missing]
    pad = DataProto.from_dict(
        {k: pad.batch[k].clone() for k in pad.batch.keys()},
        non_tensors={k: v.copy() for k, v in pad.non_tensor_batch.items()},
        meta_info=dict(batch.meta_info),
    )
    R = pad.batch["responses"].shape[1]
    pad.batch["responses"].fill_(pad_token_id)
    pad.batch["input_ids"][:, -R:] = pad_token_id
    pad.batch["attention_mask"][:, -R:] = 0
    pad.batch["response_mask"].zero_()
    if "token_level_scores" in pad.batch.keys():
        pad.batch["token_level_scores"].zero_()
    pad.non_tensor_batch["reward_valid"] = np.zeros(missing, dtype=bool)
    pad.non_tensor_batch["is_pad"] = np.ones(missing, dtype=bool)
    for key in ("step_reward", "episode_return"):
        if key in pad.non_tensor_batch:
            pad.non_tensor_batch[key] = np.zeros(missing, dtype=np.float64)
    # each inert row is its own trajectory and group, so it can never share statistics with a real row
    pad.non_tensor_batch["uid"] = np.array([f"pad-{i}" for i in range(missing)], dtype=object)
    if "traj_uid" in pad.non_tensor_batch:
        pad.non_tensor_batch["traj_uid"] = np.array([f"pad-{i}" for i in range(missing)], dtype=object)
    return DataProto.concat([batch, pad])


class AgentRollout:
    """Train and validation environments plus the trajectory collector for one trainer.

    Args:
        config: the full trainer config (reads ``env.*``, ``data.train_batch_size``, ``algorithm.adv_estimator``).
        tokenizer: the actor's tokenizer.
        rlvcr: the RLVCR phase (``adv_estimator=rlvcr``), handed over by the trainer, which builds it
            (``rlvcr.rollout_phase.make_rlvcr_phase``); None otherwise.
        prompt_suffix: text appended to every observation prompt (with RLVCR: its level guide).
        reward_runner: an ``agent_system.reward`` ``RewardRunner`` (``custom_reward_function`` in agent mode) whose
            rewards replace the environments' (:class:`agent_system.reward.trajectory.TrajectoryRewardScorer`, with
            ``algorithm.gigpo.default_step_reward``), in training and validation; None: the environments' rewards.
    """

    def __init__(self, config: DictConfig, tokenizer, rlvcr=None, prompt_suffix: str = "", reward_runner=None):
        env = config.env
        name = env.env_name
        kwargs = OmegaConf.to_container(env.get(name), resolve=True) if env.get(name) is not None else {}
        self.env_name = name
        common = dict(
            env_name=name,
            env_kwargs=kwargs,
            history_length=int(env.history_length),
            num_workers=int(env.num_workers),
            use_ray=bool(env.use_ray_workers),
            action_tag=str(env.action_tag),
            prompt_suffix=prompt_suffix,
        )
        self.train_envs = EnvironmentManager(
            num_tasks=int(config.data.train_batch_size), group_n=int(env.rollout.n), **common
        )
        self.val_batch = int(env.val_tasks)
        from agent_system.environments.base import env_class

        if getattr(env_class(name), "has_splits", False):  # e.g. rlla_multiturn: validation tasks from the test split
            common["env_kwargs"] = {**kwargs, "split": "test"}
        self.val_envs = EnvironmentManager(num_tasks=self.val_batch, group_n=1, **common)
        step_level = get_estimator_plugin(config.algorithm.adv_estimator).step_level  # GiGPO, RLVCR
        mode = env.reward_mode or ("step" if step_level else "episode")
        scorer = None
        if reward_runner is not None:
            from agent_system.reward.trajectory import TrajectoryRewardScorer

            scorer = TrajectoryRewardScorer(
                reward_runner,
                tokenizer,
                reward_mode=mode,
                default_step_reward=float(config.algorithm.gigpo.default_step_reward),
            )
            logger.info("agent mode: rewards from %s (custom_reward_function), not the environments", scorer.name)
        self.collector = TrajectoryCollector(
            tokenizer,
            max_steps=int(env.max_steps),
            max_prompt_length=int(env.max_prompt_length),
            reward_mode=mode,
            rlvcr=rlvcr,
            reward_scorer=scorer,
        )
        self.pad_token_id = self.collector.pad_token_id
        logger.info(
            "agent mode: env %s, %d tasks x %d copies per step, max %d turns, reward_mode=%s",
            name,
            self.train_envs.num_tasks,
            self.train_envs.group_n,
            self.collector.max_steps,
            mode,
        )

    def collect(
        self,
        task_seeds,
        generate_fn: Callable[[DataProto], DataProto],
        log_prob_fn: Optional[Callable[[DataProto], DataProto]] = None,
        step: int = 0,
    ) -> Tuple[DataProto, Dict]:
        """Play one training batch (sampling); returns the step rows and ``env/*`` metrics (``reward/*`` too with a
        reward runner, which receives ``step``). With RLVCR (``adv_estimator=rlvcr``) and a ``log_prob_fn`` the rows
        also get the RLVCR phase's fields."""
        return self.collector.multi_turn_loop(
            self.train_envs, generate_fn, [int(s) for s in task_seeds], log_prob_fn=log_prob_fn, step=step
        )

    def validate(self, task_seeds, generate_fn: Callable[[DataProto], DataProto], step: int = 0) -> Dict[str, float]:
        """Play the validation tasks (greedy, ``val_kwargs``) in chunks of ``env.val_tasks``; ``val/env/*`` (and
        ``val/reward/*`` with a reward runner)."""
        seeds = [int(s) for s in task_seeds]
        chunks = [seeds[i : i + self.val_batch] for i in range(0, len(seeds), self.val_batch)]
        totals: Dict[str, float] = {}
        weights = 0
        for chunk in chunks:
            chunk = chunk + [chunk[-1]] * (self.val_batch - len(chunk))  # a short last chunk repeats its last task
            _, metrics = self.collector.vanilla_multi_turn_loop(self.val_envs, generate_fn, chunk, step=step)
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            weights += 1
        return {f"val/{k}": v / weights for k, v in totals.items() if not k.startswith("timing_s/")}

    def close(self) -> None:
        """Close the environments and the reward runner."""
        self.train_envs.close()
        self.val_envs.close()
        if self.collector.reward_scorer is not None:
            self.collector.reward_scorer.close()


def update_row_multiple(config: DictConfig) -> int:
    """Rows a training batch must be a multiple of: the least common multiple of the actor's (and critic's) global
    mini-batch in rows (``ppo_mini_batch_size × rollout.n``) and the number of data-parallel workers."""
    n = int(config.actor_rollout_ref.rollout.n)
    sizes = [int(config.actor_rollout_ref.actor.ppo_mini_batch_size) * n]
    if config.critic.enable:
        sizes.append(int(config.critic.ppo_mini_batch_size) * n)
    workers = max(1, int(config.trainer.n_gpus_per_node)) * int(config.trainer.nnodes)
    return math.lcm(*sizes, workers)
