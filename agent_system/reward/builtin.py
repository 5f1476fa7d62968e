"""Built-in rewards registered through the reward API (docs/reward_api.md): the built-in RLLA reward is
itself registered through this API.

``rlla_reward`` is the ToolRL reward of ``verl.utils.reward_score`` (docs/rlla_reward.md) as a pointwise
``@reward_function``; ``get_reward_function("rlla")`` returns it. It scores exactly what the reward manager's default
path scores (same ``default_compute_score``), so a run with ``custom_reward_function.name=rlla`` gets the same numbers.
"""

from __future__ import annotations

from typing import Any

from agent_system.reward.decorator import reward_function, solution_text
from agent_system.reward.models import EvaluateResult, Message
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.rlla import RewardSwitches

__all__ = ["rlla_reward"]

COMPONENTS = ("format", "correctness", "length")


@reward_function(name="rlla")
def rlla_reward(messages: list[Message], ground_truth: Any, **kwargs: Any) -> EvaluateResult:
    """ToolRL (RLLA) reward of one rollout.

    Args:
        messages: the rollout; the last assistant message is graded unless ``kwargs["solution_str"]`` is given.
        ground_truth: the row's ``reward_model.ground_truth`` (string with ``<tool_call>``/``<response>`` blocks).
        **kwargs: ``data_source`` (default ``"rlla"``); ``extra_info`` with ``step`` and ``wrapper`` (see
            ``default_compute_score``); ``reward_switches``: a dict of ``RewardSwitches`` fields (default: read the
            environment); ``solution_str``.

    Returns:
        ``score`` = format + correctness + length, the three as ``metrics``.

    Raises:
        NotImplementedError, rlla.RLLARewardError: as ``default_compute_score`` (the sandbox turns them into an invalid
            result with the reason).
    """
    info = dict(kwargs.get("extra_info") or {})
    switches = kwargs.get("reward_switches")
    if switches is not None:
        info["reward_switches"] = RewardSwitches(**switches) if isinstance(switches, dict) else switches
    values = default_compute_score(
        kwargs.get("data_source") or "rlla", solution_text(messages, kwargs), ground_truth, info
    )
    return EvaluateResult(score=values["score"], metrics={name: values[name] for name in COMPONENTS})
