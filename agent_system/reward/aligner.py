"""The aligner: user per-step rewards (``StepOutput``) onto the system's steps (``StepData``).

Described in docs/reward_api.md, "Quick start" (the aligner). For each rollout, every
``StepOutput.base_reward`` is copied to the ``StepData`` whose ``step_info["assistant_turn_index"] == step_index``; the
rollout's ``score`` becomes its final score (the episode term). A ``step_index`` that matches no step, or that appears
twice in one result, is logged as a warning naming the rollout and counted (the first occurrence wins). Steps with no
matching output keep ``base_reward=None``; estimators use ``algorithm.gigpo.default_step_reward`` (0.0) for them
(:meth:`AlignedRollout.step_rewards`). An invalid result (``is_score_valid=False``) aligns nothing: its rollout has no
final score and no step rewards, and is excluded downstream.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from agent_system.reward.models import EvaluateResult, StepData

__all__ = ["TURN_INDEX_KEY", "AlignedRollout", "Alignment", "align"]

logger = logging.getLogger(__name__)

TURN_INDEX_KEY = "assistant_turn_index"


class AlignedRollout(BaseModel):
    """One rollout after alignment: copies of its steps with ``base_reward`` filled where a ``StepOutput`` matched."""

    rollout_id: str
    steps: list[StepData]
    final_score: float | None
    is_score_valid: bool = True
    reason: str | None = None

    def step_rewards(self, default_step_reward: float = 0.0) -> list[float]:
        """Per-step rewards in step order, ``default_step_reward`` where no ``StepOutput`` matched."""
        return [default_step_reward if s.base_reward is None else s.base_reward for s in self.steps]


class Alignment(BaseModel):
    """Output of :func:`align`: the rollouts in ``rollout_ids`` order plus the alignment counters."""

    rollouts: list[AlignedRollout]
    unmatched_step_outputs: int = 0
    duplicate_step_outputs: int = 0
    steps_without_reward: int = 0

    def metrics(self) -> dict[str, float]:
        """``reward/align_unmatched``, ``reward/align_duplicates``, ``reward/align_steps_without_reward``."""
        return {
            "reward/align_unmatched": float(self.unmatched_step_outputs),
            "reward/align_duplicates": float(self.duplicate_step_outputs),
            "reward/align_steps_without_reward": float(self.steps_without_reward),
        }


def align(
    eval_results: EvaluateResult | Sequence[EvaluateResult],
    step_data_by_rollout: Mapping[str, list[StepData]],
    rollout_ids: str | Sequence[str],
) -> Alignment:
    """Align reward results with the rollouts' steps.

    Args:
        eval_results: one result (pointwise) or one per rollout, in ``rollout_ids`` order (batch).
        step_data_by_rollout: ``rollout_id -> [StepData]`` as collected by the rollout loop (not modified).
        rollout_ids: the rollout id(s) the results belong to, in order.

    Returns:
        An :class:`Alignment` whose ``StepData`` are copies with ``base_reward`` set from the matching ``StepOutput``.

    Raises:
        ValueError: the numbers of results and rollout ids differ.
        KeyError: a rollout id is missing from ``step_data_by_rollout``.
    """
    results = [eval_results] if isinstance(eval_results, EvaluateResult) else list(eval_results)
    ids = [rollout_ids] if isinstance(rollout_ids, str) else list(rollout_ids)
    if len(results) != len(ids):
        raise ValueError(f"align: {len(results)} results for {len(ids)} rollout ids")
    out = Alignment(rollouts=[])
    for rollout_id, result in zip(ids, results):
        if rollout_id not in step_data_by_rollout:
            raise KeyError(f"align: no StepData for rollout {rollout_id!r}")
        steps = [s.model_copy(deep=True) for s in step_data_by_rollout[rollout_id]]
        if result.is_score_valid:
            _apply_step_outputs(rollout_id, result, steps, out)
        out.steps_without_reward += sum(s.base_reward is None for s in steps)
        out.rollouts.append(
            AlignedRollout(
                rollout_id=rollout_id,
                steps=steps,
                final_score=result.score if result.is_score_valid else None,
                is_score_valid=result.is_score_valid,
                reason=result.reason,
            )
        )
    return out


def _apply_step_outputs(rollout_id: str, result: EvaluateResult, steps: list[StepData], out: Alignment) -> None:
    by_turn: dict = {}
    for step in steps:
        by_turn.setdefault(step.step_info.get(TURN_INDEX_KEY), step)
    seen: set = set()
    for output in result.step_outputs or []:
        if output.step_index in seen:
            out.duplicate_step_outputs += 1
            logger.warning(
                "align: rollout %s: duplicate step_index %r ignored (first occurrence kept)",
                rollout_id,
                output.step_index,
            )
            continue
        seen.add(output.step_index)
        step = by_turn.get(output.step_index)
        if step is None:
            out.unmatched_step_outputs += 1
            logger.warning(
                "align: rollout %s: step_index %r matches no step (%s values: %s)",
                rollout_id,
                output.step_index,
                TURN_INDEX_KEY,
                [k for k in by_turn if k is not None],
            )
            continue
        step.base_reward = output.base_reward
