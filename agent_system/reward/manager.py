"""Reward manager over the reward authoring API (docs/reward_api.md).

``RewardAPIManager`` is :class:`~verl.workers.reward_manager.naive.RLLARewardManager` (same decoding, tensor layout,
components and ``reward_extra_info``) with its scoring step replaced: each row becomes a
``agent_system.reward.RewardRequest`` and a ``RewardRunner`` (in process, or the process sandbox) calls the user's
``@reward_function`` (spec "Decorator", "Sandboxed execution"). ``main_ppo`` builds it for
``custom_reward_function.path/name``.

What the reward receives for a row:

- ``messages``: the row's ``raw_prompt`` chat (when the dataset returns it) followed by one ``assistant`` message with
  the decoded response (special tokens skipped);
- ``ground_truth``: ``reward_model["ground_truth"]``;
- keywords: ``data_source``, ``extra_info`` (the row's, plus ``step`` and ``wrapper``), ``solution_str`` (the text the
  upstream-style scorer would get, per ``reward_model.decode``), ``step``, ``reward_switches`` (the RLLA switches as a
  dict).

Result -> tensors: ``score`` at the last valid response token; ``metrics`` named ``format``/``correctness``/``length``
become the component tensors, every other metric goes to ``reward_extra_info``. A single-turn response is a trajectory
of one assistant turn (index 0), aligned as in agent mode (``agent_system.reward.trajectory``): without a ``score``, the
``StepOutput`` of turn 0 is the reward; a ``StepOutput`` naming another turn is counted in ``reward/align_unmatched``.
An invalid result (the reward raised, timed out, ran out of memory, crashed, returned garbage, or returned neither a
score nor a step output for turn 0) scores 0 with ``reward_valid=False`` and its reason in ``reward_error``;
``reward_metrics`` adds ``reward/timeouts``, ``reward/crashes`` and ``reward/align_unmatched``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agent_system.reward.aligner import TURN_INDEX_KEY, align
from agent_system.reward.models import EvaluateResult, StepData, format_error
from agent_system.reward.sandbox import RewardRequest, RewardRunner
from verl.protocol import DataProto
from verl.utils.reward_score.rlla import RewardSwitches
from verl.workers.reward_manager.naive import _MAX_REASON_CHARS, RLLARewardManager, ScoreRow, ground_truth_of

__all__ = ["RewardAPIManager"]


def _outcome(result: EvaluateResult, unmatched: list[int]) -> tuple[float, dict, str]:
    """(score, metrics, reason) of one single-turn result; ``unmatched`` counts step outputs naming no turn."""
    if not result.is_score_valid:
        return 0.0, {}, (result.reason or "reward marked the result invalid")[:_MAX_REASON_CHARS]
    # one assistant turn: a trajectory of one step, aligned as in agent mode (agent_system.reward.trajectory)
    aligned = align(result, {"row": [StepData(system_step_index=0, step_info={TURN_INDEX_KEY: 0})]}, "row")
    unmatched[0] += aligned.unmatched_step_outputs
    step = aligned.rollouts[0].steps[0].base_reward
    if result.score is None and step is None:
        return 0.0, {}, "reward returned no score (EvaluateResult.score is None) and no StepOutput for turn 0"
    return float(result.score if result.score is not None else step), result.metric_values(), ""


class RewardAPIManager(RLLARewardManager):
    """Reward manager whose scores come from a reward-API function run by ``runner``.

    Args:
        tokenizer, num_examine, decode, wrapper, reward_fn_key, switches, tool_format: as :class:`RLLARewardManager`.
        runner: ``agent_system.reward.make_runner(fn, sandbox=...)``; may be shared by the training and validation
            managers. :meth:`close` closes it.

    Raises:
        TypeError: ``runner`` is not a ``RewardRunner``. ValueError: as :class:`RLLARewardManager`.
    """

    def __init__(
        self,
        tokenizer: Any,
        runner: RewardRunner,
        num_examine: int = 0,
        decode: str = "response",
        wrapper: str = "auto",
        reward_fn_key: str = "data_source",
        switches: RewardSwitches | None = None,
        tool_format: str = "toolrl",
    ) -> None:
        if not isinstance(runner, RewardRunner):
            raise TypeError(f"RewardAPIManager needs a RewardRunner, got {type(runner).__name__}")
        super().__init__(
            tokenizer,
            num_examine=num_examine,
            decode=decode,
            wrapper=wrapper,
            reward_fn_key=reward_fn_key,
            switches=switches,
            tool_format=tool_format,
        )
        self.runner = runner

    @property
    def name(self) -> str:
        """The reward-API function, for messages."""
        return repr(self.runner.fn)

    def close(self) -> None:
        """Stop the runner's worker processes."""
        self.runner.close()

    def _score_rows(
        self, data: DataProto, rows: list[ScoreRow], step: int, switches: RewardSwitches
    ) -> tuple[list[tuple[float, dict, str]], dict[str, float]]:
        """One request per row, one ``runner.run`` for the batch (see the module docstring)."""
        raw_prompts = data.non_tensor_batch.get("raw_prompt")
        responses, prompts = data.batch["responses"], data.batch["prompts"]
        outcomes: list[tuple[float, dict, str] | None] = [None] * len(rows)
        requests, requested = [], []
        for k, row in enumerate(rows):
            response = (
                row.text
                if self.decode == "response"
                else self._decode_row(
                    prompts[row.index], responses[row.index], 0, row.valid_response_len, decode="response"
                )
            )
            prompt = list(raw_prompts[row.index]) if raw_prompts is not None else []
            try:
                requests.append(
                    RewardRequest(
                        messages=[*prompt, {"role": "assistant", "content": response}],
                        ground_truth=ground_truth_of(row.reward_model),
                        kwargs={"data_source": row.data_source, "extra_info": row.extra_info, "solution_str": row.text},
                    )
                )
                requested.append(k)
            except (KeyError, ValueError) as err:
                outcomes[k] = (0.0, {}, format_error(err)[:_MAX_REASON_CHARS])
        report = self.runner.run(requests, {"step": step, "reward_switches": dataclasses.asdict(switches)})
        unmatched = [0]
        for k, result in zip(requested, report.results):
            outcomes[k] = _outcome(result, unmatched)
        metrics = report.metrics()
        return outcomes, {
            **{key: metrics[key] for key in ("reward/timeouts", "reward/crashes")},
            "reward/align_unmatched": float(unmatched[0]),
        }
