"""A reward-API function scoring multi-turn trajectories: ``custom_reward_function`` in agent mode.

docs/reward_api.md, "Quick start" (agent mode). When ``env.env_name`` is set and ``custom_reward_function`` names a
reward, the environments' rewards are replaced by the user's: after the episodes of a batch are played, every
trajectory becomes one :class:`~agent_system.reward.sandbox.RewardRequest`, the reward runs (in process or in the
process sandbox), and its :class:`~agent_system.reward.models.EvaluateResult` becomes the trajectory's rewards through
the aligner (:func:`agent_system.reward.aligner.align`).

What the reward receives for a trajectory:

- ``messages``: for every turn t in order, a ``user`` message with the observation the action was taken in (the
  row's ``anchor_obs`` as text) and an ``assistant`` message with the decoded action (special tokens skipped);
- ``ground_truth``: None (environments carry none);
- keywords: ``data_source`` (the environment), ``extra_info`` = ``{"env_step_rewards": [r_0 ...], "env_return",
  "won", "traj_uid", "uid"}`` (what the environment reported, so a reward can shape on top of it), ``step``.

How the result becomes rewards (``d`` = ``algorithm.gigpo.default_step_reward``):

- step rewards: ``StepOutput(step_index=t, base_reward=x)`` sets r_t = x (t is the 0-based assistant turn); a turn no
  ``StepOutput`` names gets r_t = d. When no ``StepOutput`` matched at all, the result is an outcome reward: the last
  turn gets r_T = ``score`` (the other turns d);
- the trajectory's return: ``score`` when given, else the sum of its r_t;
- an invalid result (the reward raised, timed out, crashed, returned garbage, ``is_score_valid=False``, or neither a
  score nor a step output) scores 0 on every turn and marks the trajectory's rows ``reward_valid=False``: they get no
  advantage and count as invalid samples (``trainer.max_invalid_frac``).

The rows then carry ``step_reward`` = r_t and ``episode_return`` = the return, and ``token_level_scores`` holds r_t
(``env.reward_mode=step``: GiGPO, RLVCR) or the return (``episode``) on the last response token. The environment's own
values stay beside them as ``env_step_reward`` / ``env_episode_return``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from agent_system.multi_turn_rollout.rollout_loop import place_on_last_token
from agent_system.reward.aligner import TURN_INDEX_KEY, align
from agent_system.reward.models import StepData, format_error
from agent_system.reward.sandbox import RewardRequest, RewardRunner
from verl.protocol import DataProto

__all__ = ["TrajectoryRewardScorer"]

logger = logging.getLogger(__name__)

REQUIRED_FIELDS = (
    "traj_uid",
    "uid",
    "step_index",
    "anchor_obs",
    "step_reward",
    "episode_return",
    "won",
    "reward_valid",
    "data_source",
)


class TrajectoryRewardScorer:
    """Scores the step rows of a multi-turn batch with a reward-API function (rules in the module docstring).

    Args:
        runner: ``agent_system.reward.make_runner(fn, ...)``; :meth:`close` closes it.
        tokenizer: decodes the actions (``batch_decode`` of the response tokens under ``response_mask``).
        reward_mode: ``"step"`` or ``"episode"`` (what ``token_level_scores`` holds).
        default_step_reward: r_t of a turn no ``StepOutput`` names (``algorithm.gigpo.default_step_reward``).

    Raises:
        TypeError: ``runner`` is not a ``RewardRunner``. ValueError: unknown ``reward_mode``.
    """

    def __init__(
        self, runner: RewardRunner, tokenizer: Any, reward_mode: str = "step", default_step_reward: float = 0.0
    ) -> None:
        if not isinstance(runner, RewardRunner):
            raise TypeError(f"TrajectoryRewardScorer needs a RewardRunner, got {type(runner).__name__}")
        if reward_mode not in ("step", "episode"):
            raise ValueError(f"env.reward_mode: expected step or episode, got {reward_mode!r}")
        self.runner, self.tokenizer = runner, tokenizer
        self.reward_mode, self.default_step_reward = reward_mode, float(default_step_reward)

    @property
    def name(self) -> str:
        """The reward-API function, for messages."""
        return repr(self.runner.fn)

    def close(self) -> None:
        """Stop the runner's worker processes."""
        self.runner.close()

    def __call__(self, batch: DataProto, step: int = 0) -> dict[str, float]:
        """Rewrite the rewards of ``batch`` (the rows of ``TrajectoryCollector.vanilla_multi_turn_loop``) in place.

        Args:
            batch: step rows with the non-tensor fields of :data:`REQUIRED_FIELDS` and ``responses`` /
                ``response_mask`` ``[B, R]``.
            step: the trainer's global step (passed to the reward as ``step``).

        Returns:
            ``reward/invalid_count``, ``reward/invalid_frac`` (over trajectories), ``reward/timeouts``,
            ``reward/crashes``, ``reward/align_*`` (:meth:`Alignment.metrics`) and ``reward/score/mean`` (mean return
            of the valid trajectories).

        Raises:
            KeyError: a field of :data:`REQUIRED_FIELDS` is missing (named).
        """
        nt = batch.non_tensor_batch
        missing = [k for k in REQUIRED_FIELDS if k not in nt]
        if missing:
            raise KeyError(f"TrajectoryRewardScorer: the batch lacks {missing} (rows of the multi-turn rollout)")
        texts = self.tokenizer.batch_decode(
            [r[m.bool()].tolist() for r, m in zip(batch.batch["responses"], batch.batch["response_mask"])],
            skip_special_tokens=True,
        )
        rows_of: dict[str, list[int]] = defaultdict(list)
        for i, traj in enumerate(nt["traj_uid"]):
            rows_of[str(traj)].append(i)
        traj_ids = list(rows_of)
        for traj in traj_ids:
            rows_of[traj].sort(key=lambda i: int(nt["step_index"][i]))
        requests = [self._request(nt, texts, rows_of[traj]) for traj in traj_ids]
        report = self.runner.run(requests, {"step": int(step)})
        steps = {
            traj: [
                StepData(
                    system_step_index=int(nt["step_index"][i]),
                    raw_policy_output=texts[i],
                    step_info={TURN_INDEX_KEY: int(nt["step_index"][i])},
                )
                for i in rows_of[traj]
            ]
            for traj in traj_ids
        }
        alignment = align(report.results, steps, traj_ids)
        step_reward = np.zeros(len(batch), dtype=np.float64)
        episode = np.zeros(len(batch), dtype=np.float64)
        valid = np.asarray(nt["reward_valid"], dtype=bool).copy()
        returns, invalid = [], 0
        for traj, aligned in zip(traj_ids, alignment.rollouts):
            rows = rows_of[traj]
            matched = any(s.base_reward is not None for s in aligned.steps)
            if not aligned.is_score_valid or (aligned.final_score is None and not matched):
                invalid += 1
                valid[rows] = False
                reason = aligned.reason or "the reward returned neither a score nor a step output"
                logger.warning(
                    "agent reward: trajectory %s: invalid result (%s): its rows get no advantage", traj, reason[:200]
                )
                continue
            rewards = aligned.step_rewards(self.default_step_reward)
            if not matched:  # an outcome reward: the score on the last turn
                rewards[-1] = float(aligned.final_score)
            total = float(aligned.final_score) if aligned.final_score is not None else float(sum(rewards))
            step_reward[rows], episode[rows] = rewards, total
            returns.append(total)
        nt["env_step_reward"], nt["env_episode_return"] = nt["step_reward"], nt["episode_return"]
        nt["step_reward"], nt["episode_return"], nt["reward_valid"] = step_reward, episode, valid
        values = step_reward if self.reward_mode == "step" else episode
        batch.batch["token_level_scores"] = place_on_last_token(torch.as_tensor(values), batch.batch["response_mask"])
        n = len(traj_ids)
        metrics = {
            "reward/invalid_count": float(invalid),
            "reward/invalid_frac": invalid / n if n else 0.0,
            "reward/timeouts": float(report.timeouts),
            "reward/crashes": float(report.crashes),
            **alignment.metrics(),
        }
        if returns:
            metrics["reward/score/mean"] = float(np.mean(returns))
        return metrics

    @staticmethod
    def _request(nt: dict, texts: list[str], rows: list[int]) -> RewardRequest:
        messages = []
        for i in rows:
            messages += [
                {"role": "user", "content": str(nt["anchor_obs"][i])},
                {"role": "assistant", "content": texts[i]},
            ]
        first = rows[0]
        extra = {
            "env_step_rewards": [float(nt["step_reward"][i]) for i in rows],
            "env_return": float(nt["episode_return"][first]),
            "won": bool(nt["won"][first]),
            "traj_uid": str(nt["traj_uid"][first]),
            "uid": str(nt["uid"][first]),
        }
        try:
            return RewardRequest(
                messages=messages,
                ground_truth=None,
                kwargs={"data_source": str(nt["data_source"][first]), "extra_info": extra},
            )
        except ValueError as err:  # pydantic: a message that cannot be built (should not happen for text)
            raise ValueError(f"agent reward: trajectory {extra['traj_uid']}: {format_error(err)}") from err
