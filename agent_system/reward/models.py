"""Data types of the reward authoring API (``docs/reward_api.md`` "Types").

User reward functions read :class:`Message` lists and return :class:`EvaluateResult` (optionally with per-step
:class:`StepOutput`); the system keeps its own per-step record, :class:`StepData`, filled by the multi-turn rollout
loop and completed by the aligner (``agent_system.reward.aligner``).

Backward compatibility (``docs/reward_api.md`` "Backward compatibility"): :func:`coerce_result` turns what older
reward functions return -- a number, or upstream verl's ``{"score": ..., <extra numeric keys>}`` dict -- into an
:class:`EvaluateResult`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "MAX_REASON_CHARS",
    "EvaluateResult",
    "FunctionCall",
    "Message",
    "MetricResult",
    "StepData",
    "StepOutput",
    "ToolCall",
    "coerce_result",
    "format_error",
    "invalid_result",
]

MAX_REASON_CHARS = 500


def _finite(value: float | None, what: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value}")
    return value


class FunctionCall(BaseModel):
    """The ``function`` part of an OpenAI tool call: ``name`` and ``arguments`` (a JSON string; a dict is encoded)."""

    name: str
    arguments: str = "{}"

    @field_validator("arguments", mode="before")
    @classmethod
    def _encode_arguments(cls, value: Any) -> Any:
        return json.dumps(value) if isinstance(value, (dict, list)) else value


class ToolCall(BaseModel):
    """One tool call in the OpenAI chat shape: ``{"id", "type": "function", "function": {"name", "arguments"}}``."""

    id: str | None = None
    type: str = "function"
    function: FunctionCall


class Message(BaseModel):
    """One chat message, the input of user reward functions (``docs/reward_api.md`` "Types": ``Message(role, content,
    tool_calls=None, tool_call_id=None, name=None)``).

    Attributes:
        role: ``"system"``, ``"user"``, ``"assistant"``, ``"tool"`` or any other role the data uses.
        content: text, a list of OpenAI content parts, or None (an assistant message that only calls tools).
        tool_calls: OpenAI-shaped tool calls of an assistant message.
        tool_call_id: the call a ``tool`` message answers.
        name: optional author name (OpenAI) or tool name.

    Unknown keys of a dict message are ignored.
    """

    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict[str, Any]] | None = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        """``content`` as plain text: the string itself, the ``text`` parts joined, or ``""`` for None."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content)


class MetricResult(BaseModel):
    """A named sub-score with its own reason and validity (e.g. ``format``, ``correctness``)."""

    score: float
    reason: str | None = None
    is_score_valid: bool = True

    @field_validator("score")
    @classmethod
    def _check_score(cls, value: float) -> float:
        return _finite(value, "MetricResult.score")


class StepOutput(BaseModel):
    """Per-step base reward from a user reward function (``docs/reward_api.md`` "Types").

    Attributes:
        step_index: the step it rewards; the aligner matches it against ``StepData.step_info["assistant_turn_index"]``
            (0 for the first assistant turn of the rollout, 1 for the second, ...). Matching is exact: ``2`` and
            ``"2"`` differ.
        base_reward: finite float.
        metrics: free-form per-step diagnostics.
        reason: optional explanation.
    """

    step_index: int | str
    base_reward: float
    metrics: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None

    @field_validator("base_reward")
    @classmethod
    def _check_reward(cls, value: float) -> float:
        return _finite(value, "StepOutput.base_reward")


class EvaluateResult(BaseModel):
    """What a reward function returns for one rollout (``docs/reward_api.md`` "Types").

    Attributes:
        score: the rollout's (final) score; None when only ``step_outputs`` are given. Must be finite.
        is_score_valid: False marks the sample invalid: it gets no reward and is excluded from its group's statistics
            (``docs/reward_api.md`` "Invalid results"). The sandbox sets it, with ``reason``, when the function
            raises, times out, exceeds its memory limit, crashes or returns something that cannot be coerced.
        reason: explanation (the error for invalid results).
        metrics: named sub-scores, numbers or :class:`MetricResult`; ``format``/``correctness``/``length`` become the
            reward manager's component tensors, every metric goes to ``reward_extra_info``.
        step_outputs: per-step base rewards for step-level estimators (GiGPO), aligned by ``step_index``.
    """

    score: float | None = None
    is_score_valid: bool = True
    reason: str | None = None
    metrics: dict[str, float | MetricResult] = Field(default_factory=dict)
    step_outputs: list[StepOutput] | None = None

    @field_validator("score")
    @classmethod
    def _check_score(cls, value: float | None) -> float | None:
        return _finite(value, "EvaluateResult.score")

    def metric_values(self) -> dict[str, float]:
        """``metrics`` as plain floats (a :class:`MetricResult` contributes its ``score``)."""
        return {k: (v.score if isinstance(v, MetricResult) else float(v)) for k, v in self.metrics.items()}


class StepData(BaseModel):
    """The system's own record of one step of a rollout (``docs/reward_api.md`` "Types"), filled by the multi-turn
    rollout loop; reward functions never see it.

    Attributes:
        system_step_index: position of the step in the rollout (0-based).
        observation_data: what the policy saw (often the message list so far).
        action_taken: structured action, e.g. ``{"type": "text", "content": ...}`` or a tool call.
        raw_policy_output: the full completion text when it differs from ``action_taken``.
        resulting_messages_history: all messages after the action and any tool responses.
        policy_logprobs: log-probabilities of the action.
        policy_value_estimate: the critic's V(s), when there is one.
        is_done: the episode ended after this step.
        step_info: diagnostics; ``step_info["assistant_turn_index"]`` is the index :class:`StepOutput` refers to.
        base_reward: filled by the aligner from the matching ``StepOutput`` (None when none matched).
        advantage, return_to_go: filled by the estimator.
    """

    system_step_index: int
    observation_data: Any = None
    action_taken: dict[str, Any] = Field(default_factory=dict)
    raw_policy_output: str | None = None
    resulting_messages_history: list[Message] = Field(default_factory=list)
    policy_logprobs: dict[str, Any] | None = None
    policy_value_estimate: float | None = None
    is_done: bool = False
    step_info: dict[str, Any] = Field(default_factory=dict)
    base_reward: float | None = None
    advantage: float | None = None
    return_to_go: float | None = None


# -------------------- coercion of legacy returns and invalid results --------------------------------------------------
_RESULT_FIELDS = frozenset(EvaluateResult.model_fields)


def coerce_result(value: Any) -> EvaluateResult:
    """Turn a reward function's return value into an :class:`EvaluateResult` (``docs/reward_api.md`` "Backward
    compatibility").

    Accepted: an :class:`EvaluateResult`; an int/float (incl. bool) -> ``score``; a dict whose keys are all
    ``EvaluateResult`` fields (validated as one); upstream verl's dict ``{"score": x, **extra}`` -> ``score=x`` and
    the numeric extras as ``metrics``.

    Raises:
        TypeError: anything else, or a legacy dict whose extra values are not numbers (the message names the key).
        ValueError: a non-finite score (pydantic ``ValidationError`` is a ``ValueError``).
    """
    if isinstance(value, EvaluateResult):
        return value
    if isinstance(value, (int, float)):
        return EvaluateResult(score=float(value))
    if isinstance(value, dict):
        if "score" not in value and "step_outputs" not in value:
            raise TypeError(f"reward returned a dict without 'score' (keys {sorted(map(str, value))[:10]})")
        if set(value) <= _RESULT_FIELDS:
            return EvaluateResult.model_validate(value)
        extras = {k: v for k, v in value.items() if k != "score"}
        for key, extra in extras.items():
            if not isinstance(extra, (int, float)):
                raise TypeError(
                    f"reward returned a dict whose extra key {key!r} is a {type(extra).__name__}; "
                    "extra keys must be numbers (they become EvaluateResult.metrics)"
                )
        return EvaluateResult(score=value["score"], metrics={k: float(v) for k, v in extras.items()})
    raise TypeError(
        f"reward returned {type(value).__name__} {str(value)[:80]!r}; expected EvaluateResult, a number "
        "or a dict with 'score'"
    )


def format_error(err: BaseException) -> str:
    """``"Type: message"`` of an exception, cut to ``MAX_REASON_CHARS`` (the reason of an invalid result)."""
    if isinstance(err, ValidationError):
        text = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        return f"ValidationError: {text}"[:MAX_REASON_CHARS]
    return f"{type(err).__name__}: {err}"[:MAX_REASON_CHARS]


def invalid_result(reason: str) -> EvaluateResult:
    """An invalid result (no score, ``is_score_valid=False``) carrying ``reason``."""
    return EvaluateResult(score=None, is_score_valid=False, reason=reason[:MAX_REASON_CHARS])
