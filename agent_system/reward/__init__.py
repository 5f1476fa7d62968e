"""Reward authoring API (docs/reward_api.md).

- types: :class:`Message`, :class:`EvaluateResult`, :class:`StepOutput`, :class:`MetricResult`, :class:`StepData`;
- ``@reward_function`` (pointwise / batch), ``load_reward_function(path, name)``, the named-reward registry
  (``get_reward_function("rlla")``: the built-in ToolRL reward);
- runners: :class:`InProcessRunner` (``reward.sandbox=none``) and :class:`ProcessSandbox` (timeout, memory limit,
  crash isolation), both through :func:`make_runner`;
- :func:`align`: ``StepOutput.step_index`` -> ``StepData``.

Submodules that need torch and the trainer's data protocol (import them by name): ``manager``
(``RewardAPIManager``, the single-turn reward manager over this API), ``trajectory`` (``TrajectoryRewardScorer``, the
same for agent trajectories) and ``dry_run`` (the ``reward-dry-run`` CLI). The built-in ToolRL reward itself stays at
ToolRL's path, ``verl.utils.reward_score.rlla``, with the one tool-call parser (``verl.utils.reward_score.tool_parse``)
that the reward, the router's cost and the evaluation share.

Importing this package does not import torch or the trainer, so sandbox workers start quickly.
"""

from agent_system.reward.aligner import AlignedRollout, Alignment, align
from agent_system.reward.decorator import (
    RewardFunction,
    RewardSource,
    get_reward_function,
    load_reward_function,
    register_reward_function,
    registered_reward_functions,
    reward_function,
)
from agent_system.reward.models import EvaluateResult, Message, MetricResult, StepData, StepOutput, coerce_result
from agent_system.reward.sandbox import (
    InProcessRunner,
    ProcessSandbox,
    RewardRequest,
    RewardSandboxError,
    RunReport,
    make_runner,
)

__all__ = [
    "AlignedRollout",
    "Alignment",
    "EvaluateResult",
    "InProcessRunner",
    "Message",
    "MetricResult",
    "ProcessSandbox",
    "RewardFunction",
    "RewardRequest",
    "RewardSandboxError",
    "RewardSource",
    "RunReport",
    "StepData",
    "StepOutput",
    "align",
    "coerce_result",
    "get_reward_function",
    "load_reward_function",
    "make_runner",
    "register_reward_function",
    "registered_reward_functions",
    "reward_function",
]
