"""Tool usage of a generated response and its cost (spec "Tool usage and cost (after generation)").

Parsing uses the project's single ``<think>/<tool_call>/<response>`` parser, the lenient half of
:mod:`verl.utils.reward_score.tool_parse` (every complete ``<tool_call>`` block, unreadable items counted, never
raises).
Text inside complete ``<think>…</think>`` spans is ignored first: a thought that mentions ``<tool_call>`` is not a call
(the RLLA data has such thoughts, ``docs/rlla_reward.md`` "Crashes and oddities").

- ``used_any_tool``: a ``<tool_call>`` tag occurs outside the thoughts, readable or not. A malformed call therefore
  still costs: the policy cannot dodge the budget by writing broken JSON.
- ``used_search`` / ``used_calculate``: at least one readable call to a tool of that route
  (:func:`verl.router.families.call_route`; ``OTHER`` tools follow ``other_as``, unknown names are classified from
  the name).
- ``num_calls``: readable calls; ``num_search_calls`` / ``num_calculate_calls`` per route.

Cost per trajectory (spec): ``w_any·used_any_tool + w_search·used_search + w_calc·used_calculate + w_call·num_calls``
with ``router.cost_weights.{any_tool=1.0, search=0, calculate=0, per_call=0}``; with tools that run
(``actor_rollout_ref.rollout.multi_turn``) also ``+ w_obs·obs_tokens + w_sec·seconds``, the executed calls'
observation tokens as appended and their measured wall seconds (``obs_tokens``, ``seconds``: 0 by default).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional, Sequence

import torch

from verl.router import RouterAction, ToolFamily
from verl.router.families import call_route
from verl.utils.reward_score.tool_formats import format_tool_usage
from verl.utils.reward_score.tool_parse import THINK, find_spans

logger = logging.getLogger(__name__)

USAGE_KEYS = (
    "used_any_tool",
    "used_search",
    "used_calculate",
    "num_calls",
    "num_search_calls",
    "num_calculate_calls",
    "num_invalid_calls",
)


@dataclass(frozen=True)
class CostWeights:
    """``router.cost_weights``: weight of each usage term in the trajectory cost (spec defaults)."""

    any_tool: float = 1.0
    search: float = 0.0
    calculate: float = 0.0
    per_call: float = 0.0
    obs_tokens: float = 0.0
    seconds: float = 0.0

    @classmethod
    def from_config(cls, config: Optional[Mapping[str, Any]]) -> "CostWeights":
        """Build from a dict / DictConfig; missing keys keep their defaults.

        Raises:
            ValueError: an unknown key or a non-numeric weight (``router.cost_weights.<key>`` is named).
        """
        if config is None:
            return cls()
        known = {f.name for f in fields(cls)}
        values = {}
        for key in config:
            if key not in known:
                raise ValueError(f"router.cost_weights.{key}: unknown weight; expected {sorted(known)}")
            try:
                values[key] = float(config[key])
            except (TypeError, ValueError):
                raise ValueError(f"router.cost_weights.{key}: expected a number, got {config[key]!r}") from None
        return cls(**values)


@dataclass(frozen=True)
class RouterToolUsage:
    """Tool usage of one response (definitions in the module docstring)."""

    used_any_tool: bool
    used_search: bool
    used_calculate: bool
    num_calls: int
    num_search_calls: int
    num_calculate_calls: int
    num_invalid_calls: int


def strip_thoughts(text: str) -> str:
    """``text`` without its complete ``<think>…</think>`` spans."""
    spans = find_spans(text, THINK)
    if not spans:
        return text
    pieces, last = [], 0
    for span in spans:
        pieces.append(text[last : span.start])
        last = span.end
    pieces.append(text[last:])
    return "".join(pieces)


def response_tool_usage(
    response: str,
    families: Mapping[str, ToolFamily],
    other_as: Optional[RouterAction] = RouterAction.SEARCH,
    tool_format: str = "toolrl",
) -> RouterToolUsage:
    """Tool usage of one response.

    Args:
        response: the generated response text only (not the prompt: the RLLA system prompt itself shows a
            ``<tool_call>`` example); special tokens may be kept.
        families: the row's ``{tool_name: ToolFamily}`` (:func:`verl.router.families.row_tool_families`).
        other_as: the route ``OTHER`` tools count for (None: neither).
        tool_format: how the response writes its calls (``data.tool_format``; ``tool_formats.format_tool_usage``).
    """
    usage = format_tool_usage(strip_thoughts(response), tool_format)
    routes = [call_route(name, families, other_as) for name in usage.names]
    n_search = sum(r == RouterAction.SEARCH for r in routes)
    n_calc = sum(r == RouterAction.CALCULATE for r in routes)
    return RouterToolUsage(
        used_any_tool=usage.has_tool_call_tag or usage.num_calls > 0,
        used_search=n_search > 0,
        used_calculate=n_calc > 0,
        num_calls=usage.num_calls,
        num_search_calls=n_search,
        num_calculate_calls=n_calc,
        num_invalid_calls=usage.num_invalid,
    )


def batch_tool_usage(
    responses: Sequence[str],
    families: Sequence[Mapping[str, ToolFamily]],
    other_as: Optional[RouterAction] = RouterAction.SEARCH,
    tool_format: str = "toolrl",
) -> dict[str, torch.Tensor]:
    """:func:`response_tool_usage` for a batch, as tensors ``[B]`` keyed by :data:`USAGE_KEYS` (bools as float32
    0/1, counts as float32 too so they can be averaged and weighted directly).

    Raises:
        ValueError: ``responses`` and ``families`` differ in length.
    """
    if len(responses) != len(families):
        raise ValueError(f"batch_tool_usage: {len(responses)} responses but {len(families)} family maps")
    rows = [response_tool_usage(r, f, other_as, tool_format) for r, f in zip(responses, families)]
    return {key: torch.tensor([float(getattr(u, key)) for u in rows], dtype=torch.float32) for key in USAGE_KEYS}


def trajectory_cost(
    used_any_tool: torch.Tensor,
    used_search: torch.Tensor,
    used_calculate: torch.Tensor,
    num_calls: torch.Tensor,
    any_tool: float = 1.0,
    search: float = 0.0,
    calculate: float = 0.0,
    per_call: float = 0.0,
) -> torch.Tensor:
    """Tool cost per trajectory (spec "Tool usage and cost"):
    ``any_tool·used_any_tool + search·used_search + calculate·used_calculate + per_call·num_calls``.

    Args: four tensors ``[B]`` (0/1 or counts, any numeric dtype) and the four weights.
    Returns: float32 ``[B]``.
    """
    return (
        any_tool * used_any_tool.float()
        + search * used_search.float()
        + calculate * used_calculate.float()
        + per_call * num_calls.float()
    )


def compute_costs(
    responses: Sequence[str],
    families: Sequence[Mapping[str, ToolFamily]],
    weights: CostWeights = CostWeights(),
    other_as: Optional[RouterAction] = RouterAction.SEARCH,
    tool_format: str = "toolrl",
    obs_tokens: Optional[Sequence[float]] = None,
    seconds: Optional[Sequence[float]] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Costs of a batch of responses: ``(cost float32 [B], usage tensors [B] by USAGE_KEYS)``; the calls are read
    in ``tool_format`` (``data.tool_format``), the same parser as the reward's.

    Args:
        obs_tokens, seconds: per response, the executed calls' observation tokens and wall seconds ([B]; the
            multi-turn rollout's ``tool_obs_tokens`` / ``tool_seconds``), added to the usage when given.

    Raises:
        ValueError: a weight of ``obs_tokens`` or ``seconds`` is set but those values are not given (single-turn
            responses execute nothing), or they are not one per response.
    """
    usage = batch_tool_usage(responses, families, other_as, tool_format)
    extra = torch.zeros(len(responses), dtype=torch.float32)
    for name, values, weight in (("obs_tokens", obs_tokens, weights.obs_tokens), ("seconds", seconds, weights.seconds)):
        if values is None:
            if weight:
                raise ValueError(
                    f"router.cost_weights.{name}={weight}: the responses executed no tools to measure "
                    "(set actor_rollout_ref.rollout.multi_turn.enable=true)"
                )
            continue
        if len(values) != len(responses):
            raise ValueError(f"compute_costs: {len(values)} {name} values for {len(responses)} responses")
        usage[name] = torch.tensor([float(v) for v in values], dtype=torch.float32)
        extra = extra + weight * usage[name]
    cost = trajectory_cost(
        usage["used_any_tool"],
        usage["used_search"],
        usage["used_calculate"],
        usage["num_calls"],
        weights.any_tool,
        weights.search,
        weights.calculate,
        weights.per_call,
    )
    return cost + extra, usage
