"""Rule-based reward functions, dispatched by ``data_source`` (upstream verl's ``default_compute_score``).

Built in: the RLLA (ToolRL) reward, for any ``data_source`` containing ``"rlla"``
(``verl.utils.reward_score.rlla.compute_score``, ``docs/rlla_reward.md`` "How it is called"), and the ``route_qa``
task's exact match (``verl.utils.reward_score.route_qa``, ``docs/route_qa.md``). Upstream's signature has
no ``step``; the adapter takes it, and the chat wrapper, from ``extra_info`` (``docs/verl_compat.md`` "Reward
manager").
"""

from __future__ import annotations

from typing import Any

from verl.utils.reward_score import rlla, route_qa

__all__ = ["default_compute_score", "rlla", "route_qa"]


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, float]:
    """Score one sample with the reward of its ``data_source`` (upstream verl signature).

    Args:
        data_source: the row's ``data_source``; anything containing ``"rlla"`` is scored by the RLLA reward,
            ``"route_qa"`` by exact match (``route_qa.compute_score``, whose keys it then returns).
        solution_str: decoded response (or prompt + response).
        ground_truth: the row's ``reward_model["ground_truth"]``.
        extra_info: optional dict; ``step`` (int, default 0) is the trainer step for the RLLA schedules,
            ``wrapper`` (``"qwen"``/``"llama"``/``"none"``, default None = from ``EXPERIMENT_NAME``) the chat wrapper,
            ``reward_switches`` an optional ``rlla.RewardSwitches`` snapshot (default: read the environment),
            ``tool_format`` how the response writes its calls (``data.tool_format``; default ``toolrl``).
        **kwargs: accepted and ignored (upstream passes extra keyword arguments to custom scorers).

    Returns:
        ``{"score", "format", "correctness", "length"}`` (floats; score is the sum of the three others) and
        ``"pred"``, the answer the sample gives (``rlla.answer_of``: its tool calls or its response text), which
        validation with ``val_kwargs.n > 1`` votes on for ``maj@N``.

    Raises:
        NotImplementedError: no reward is registered for ``data_source``.
        rlla.RLLARewardError: see ``rlla.compute_score`` (invalid ground truth, unknown chat wrapper).
    """
    info = extra_info or {}
    if data_source == route_qa.DATA_SOURCE:
        return route_qa.compute_score(solution_str, ground_truth)
    if not isinstance(data_source, str) or "rlla" not in data_source:
        raise NotImplementedError(
            f"no reward function for data_source={data_source!r}: data sources containing 'rlla' and "
            f"'{route_qa.DATA_SOURCE}' are built in; "
            "set custom_reward_function.path/name for others"
        )
    score, fmt, correctness, length = rlla.compute_score(
        solution_str,
        ground_truth,
        step=info.get("step", 0),
        wrapper=info.get("wrapper"),
        switches=info.get("reward_switches"),
        tool_format=info.get("tool_format") or "toolrl",
    )
    pred = rlla.answer_of(
        solution_str,
        info.get("wrapper"),
        switches=info.get("reward_switches"),
        tool_format=info.get("tool_format") or "toolrl",
    )
    return {
        "score": float(score),
        "format": float(fmt),
        "correctness": float(correctness),
        "length": float(length),
        "pred": pred,
    }
