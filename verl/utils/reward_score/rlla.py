"""The ToolRL (RLLA) reward: format + tool-call correctness (+ optional think length).

Behaviour reproduced case by case from ToolRL's reward (Qian et al. 2025, arXiv 2504.13958), written out in
``docs/rlla_reward.md`` (cited below as "spec" with the section name), and checked against every line of the golden
file in the shared reference folder, ``$TOOLRL_SHARED`` (``tests/reward/test_rlla_reward_golden.py``; spec "Golden
file check"). Parsing goes through ``verl.utils.reward_score.tool_parse`` (strict, reward-compatible functions).

Differences from the reference, all deliberate:

- nothing is printed; scores are logged at DEBUG;
- where the reference crashed, a typed error is raised instead: ``InvalidGroundTruthError`` (the GT's first
  ``<tool_call>`` block is not one JSON value per line; the message names the line) and
  ``UnknownModelWrapperError`` (``EXPERIMENT_NAME`` names no known chat wrapper). Both derive from
  ``RLLARewardError`` (a ``ValueError``); the second is also a ``NotImplementedError`` like the reference's;
- the chat wrapper can be passed explicitly (``wrapper=``) and the switches as a ``RewardSwitches`` snapshot
  (``switches=``) so that callers need not touch the environment;
- the length term is ``0.0`` (a float) when ``WITHLENGTH`` is off; the reference returned the int ``0``.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from verl.utils.reward_score.tool_parse import (
    RESPONSE,
    TOOL_CALL,
    WRAPPERS,
    ToolCallJSONError,
    close_tag,
    extract_assistant_turn,
    first_block,
    open_tag,
    parse_tool_lines,
    strict_tool_calls,
)

logger = logging.getLogger(__name__)

__all__ = [
    "SWITCH_ENV_VARS",
    "InvalidGroundTruthError",
    "RLLARewardError",
    "RewardSwitches",
    "UnknownModelWrapperError",
    "answer_of",
    "compute_score",
    "compute_tool_call_reward",
    "correctness_range",
    "correctness_reward",
    "format_range",
    "format_reward",
    "length_reward",
    "match_score",
    "parse_ground_truth_tools",
    "resolve_wrapper",
]


class RLLARewardError(ValueError):
    """Base class of the errors where the reference RLLA reward crashed (spec "Crashes and oddities")."""


class InvalidGroundTruthError(RLLARewardError):
    """The ground truth cannot be scored against: not a string, or its first ``<tool_call>`` block is not one JSON
    value per line (the reference's uncaught ``json.loads``; spec "Correctness score")."""


class UnknownModelWrapperError(RLLARewardError, NotImplementedError):
    """No chat wrapper could be chosen: ``EXPERIMENT_NAME`` contains neither ``"llama"`` nor ``"qwen"`` (case-sensitive)
    and none was passed, or an unknown ``wrapper=`` was passed (spec "Extracting the prediction")."""


# Environment variable of each RewardSwitches field (spec "Switches").
SWITCH_ENV_VARS: dict[str, str] = {
    "withlength": "WITHLENGTH",
    "schedulelength": "SCHEDULELENGTH",
    "correctmax1": "CORRECTMAX1",
    "max1step30max3": "MAX1STEP30MAX3",
    "schedulereward": "SCHEDULEREWARD",
    "refinedreward": "REFINEDREWARD",
    "coarsereward": "COARSEREWARD",
    "intermediatereward": "INTERMEDIATEREWARD",
    "strictmatch": "STRICTMATCH",
}


@dataclass(frozen=True)
class RewardSwitches:
    """Snapshot of the reward switches (spec "Switches"). A switch is on only when its variable is exactly ``"1"``.

    ``strictmatch`` is recorded for completeness and, as in the reference, read nowhere. ``experiment_name`` is the
    raw ``EXPERIMENT_NAME`` (``""`` when unset); it picks the chat wrapper when ``compute_score`` gets none.
    """

    withlength: bool = False
    schedulelength: bool = False
    correctmax1: bool = False
    max1step30max3: bool = False
    schedulereward: bool = False
    refinedreward: bool = False
    coarsereward: bool = False
    intermediatereward: bool = False
    strictmatch: bool = False
    experiment_name: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "RewardSwitches":
        """Read the switches from ``environ`` (default ``os.environ``) now."""
        env = os.environ if environ is None else environ
        flags = {name: str(env.get(var, "0")) == "1" for name, var in SWITCH_ENV_VARS.items()}
        return cls(**flags, experiment_name=str(env.get("EXPERIMENT_NAME", "")))

    def active(self) -> list[str]:
        """Names of the environment variables that are on (for logs)."""
        return [SWITCH_ENV_VARS[f.name] for f in fields(self) if f.name in SWITCH_ENV_VARS and getattr(self, f.name)]


def resolve_wrapper(wrapper: str | None, experiment_name: str) -> str:
    """The chat wrapper to strip: ``wrapper`` itself if given, else chosen from ``experiment_name`` like ToolRL:
    ``"llama"`` if it contains ``llama``, else ``"qwen"`` if it contains ``qwen`` (both case-sensitive; spec
    "Extracting the prediction").

    Raises:
        UnknownModelWrapperError: ``wrapper`` is not one of ``"qwen"``, ``"llama"``, ``"none"``, or it is None and
            ``experiment_name`` contains neither substring (including ``"Qwen…"`` and an unset variable).
    """
    if wrapper is not None:
        if wrapper not in WRAPPERS:
            raise UnknownModelWrapperError(f"unknown wrapper={wrapper!r}; expected one of {WRAPPERS}")
        return wrapper
    if "llama" in experiment_name:
        return "llama"
    if "qwen" in experiment_name:
        return "qwen"
    raise UnknownModelWrapperError(
        f"Unknown model name: EXPERIMENT_NAME={experiment_name!r}. It must contain 'llama' or 'qwen' (case-sensitive; "
        "'Qwen' does not count) to choose the chat wrapper, or pass wrapper='qwen'|'llama'|'none' explicitly."
    )


def format_range(step: float, switches: RewardSwitches) -> tuple[float, float]:
    """``(max, min)`` of the format term at ``step`` (spec "Format score" and "Switches").

    Default (1, 0). MAX1STEP30MAX3: halved from step 30. Then SCHEDULEREWARD:
    max = max(1, 2 − (2 − max)·step/150), min = min(−1, −2 + (2 + min)·step/150).
    """
    fmax, fmin = 1.0, 0.0
    if switches.max1step30max3 and step >= 30:
        fmax, fmin = fmax / 2, fmin / 2
    if switches.schedulereward:
        fmax = 2 - (2 - fmax) * step / 150
        fmin = -2 + (2 + fmin) * step / 150
        fmax = max(fmax, 1.0)
        fmin = min(fmin, -1.0)
    return fmax, fmin


def correctness_range(step: float, switches: RewardSwitches) -> tuple[float, float]:
    """``(max, min)`` of the correctness term at ``step`` (spec "Correctness score" and "Switches").

    Default (3, −3); CORRECTMAX1 (1, −1). MAX1STEP30MAX3: divided by 3 before step 30. Then SCHEDULEREWARD:
    max = min(3, (max − 2)·step/150 + 2), min = max(−3, (min + 2)·step/150 − 2).
    """
    cmax, cmin = (1.0, -1.0) if switches.correctmax1 else (3.0, -3.0)
    if switches.max1step30max3 and step < 30:
        cmax, cmin = cmax / 3, cmin / 3
    if switches.schedulereward:
        cmax = (cmax - 2) * step / 150 + 2
        cmin = (cmin + 2) * step / 150 - 2
        cmax = min(cmax, 3.0)
        cmin = max(cmin, -3.0)
    return cmax, cmin


def match_score(list1: list, list2: list, refined: bool = False) -> float:
    """Similarity of two lists (tool names, or one tool's parameter keys); spec "Correctness score" step 2 and
    REFINEDREWARD.

    1.0 for equal lists; with ``refined`` 0.0 for anything else; otherwise 0.0 if either is empty, else the multiset
    Jaccard ratio |A∩B| / (|A| + |B| − |A∩B|).

    Raises:
        TypeError: an element is unhashable (the caller's ``except`` turns it into the minimum, as in the reference).
    """
    if list1 == list2:
        return 1.0
    if refined or not list1 or not list2:
        return 0.0
    count1, count2 = Counter(list1), Counter(list2)
    intersection = sum(min(count1[k], count2[k]) for k in count1.keys() & count2.keys())
    union = len(list1) + len(list2) - intersection
    return intersection / union if union > 0 else 0.0


def format_reward(prediction: str, ground_truth: str, fmax: float, fmin: float) -> float:
    """``fmax`` if ``prediction`` has the shape the GT calls for, else ``fmin`` (spec "Format score").

    The expected shape comes from substring tests on the whole GT (think included); each pattern is anchored with
    ``^…$`` under DOTALL, and the tool_call/response tags must each occur exactly once (think tags are not counted).
    """
    has_call, has_resp = open_tag(TOOL_CALL) in ground_truth, open_tag(RESPONSE) in ground_truth
    call_tags = (open_tag(TOOL_CALL), close_tag(TOOL_CALL))
    resp_tags = (open_tag(RESPONSE), close_tag(RESPONSE))
    if has_resp and not has_call:
        pattern, once = r"^<think>.*?</think>\n<response>.*?</response>$", resp_tags
    elif has_call and not has_resp:
        pattern, once = r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>$", call_tags
    elif has_call and has_resp:
        pattern = r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>\n<response>.*?</response>$"
        once = call_tags + resp_tags
    else:
        pattern, once = r"^<think>.*?</think>$", ()
    if re.search(pattern, prediction, re.DOTALL) and all(prediction.count(tag) == 1 for tag in once):
        return fmax
    return fmin


def length_reward(
    prediction: str, step: float, switches: RewardSwitches, lmax: float = 1.0, lmin: float = 0.0
) -> float:
    """Think-length term (spec "Length score"); only added by ``compute_score`` under WITHLENGTH.

    ``lmin`` if the prediction lacks ``<think>`` or ``</think>``; else, with ``w`` the whitespace-separated words
    after the last ``<think>`` and before the next ``</think>``: ``min(1, round(w / L, 2))·(lmax − lmin) + lmin``,
    L = 512, or 384 + 256·step/105 (uncapped) under SCHEDULELENGTH. Python's ``round`` (exact binary value).
    """
    if "<think>" not in prediction or "</think>" not in prediction:
        return lmin
    max_len = (640 - 384) * step / 105 + 384 if switches.schedulelength else 512
    words = len(prediction.split("<think>")[-1].split("</think>")[0].strip().split())
    ratio = min(round(words / max_len, 2), 1.0)
    return ratio * (lmax - lmin) + lmin


def parse_ground_truth_tools(ground_truth: str) -> list[Any]:
    """The GT's tool calls, parsed like the reference (first block, one JSON per line; no validation of the values).

    Raises:
        InvalidGroundTruthError: a line of the GT's first ``<tool_call>`` block is not valid JSON (the reference
            crashed here). The message names the line; the ``json.JSONDecodeError`` is chained.
    """
    try:
        return parse_tool_lines(first_block(ground_truth, TOOL_CALL))
    except ToolCallJSONError as err:
        raise InvalidGroundTruthError(
            f"invalid ground truth: {err} (ground truth starts {ground_truth[:120]!r})"
        ) from err.json_error


def compute_tool_call_reward(
    gt_tools: list, pd_tools: list, cmax: float, cmin: float, switches: RewardSwitches
) -> float:
    """Correctness of predicted tool calls against the GT's (spec "Correctness score", steps 1–5).

    1. ``gt_tools == pd_tools`` → ``cmax`` (COARSEREWARD: anything else → ``cmin``).
    2. S = match_score(gt names, pd names).
    3. M = 1 + Σ_gt (1 + |params|) (INTERMEDIATEREWARD: 1 + number of GT tools).
    4. Greedy: each GT tool in order takes the unused same-name predicted tool with the highest
       match_score(keys) + #{k: pd[k] == gt[k]} (strictly above 0 and above earlier candidates, so the first wins
       ties; INTERMEDIATEREWARD: the first unused tool equal to it, worth 1); its value is added to S.
    5. Returns (cmax − cmin)·S/M + cmin.

    Raises:
        KeyError, TypeError, AttributeError: malformed tools (missing ``name``/``parameters``, non-dict values);
            ``correctness_reward`` maps any exception to ``cmin`` as the reference does.
    """
    if gt_tools == pd_tools:
        return cmax
    if switches.coarsereward:
        return cmin
    refined = switches.refinedreward
    score = match_score([t["name"] for t in gt_tools], [t["name"] for t in pd_tools], refined)
    denominator = 1.0
    used: set[int] = set()
    for gt_tool in gt_tools:
        gt_name, gt_params = gt_tool["name"], gt_tool["parameters"]
        denominator += 1.0 if switches.intermediatereward else 1.0 + len(gt_params)
        best_index, best_score = -1, 0.0
        for i, pd_tool in enumerate(pd_tools):
            if i in used or pd_tool["name"] != gt_name:
                continue
            if switches.intermediatereward:
                if gt_tool == pd_tool:
                    best_index, best_score = i, 1.0
                    break
                continue
            pd_params = pd_tool["parameters"]
            total = match_score(list(gt_params.keys()), list(pd_params.keys()), refined)
            total += sum(1.0 for k, v in gt_params.items() if k in pd_params and pd_params[k] == v)
            if total > best_score:
                best_index, best_score = i, total
        if best_index >= 0:
            used.add(best_index)
            score += best_score
    return (cmax - cmin) * score / denominator + cmin


def correctness_reward(prediction: str, ground_truth: str, cmax: float, cmin: float, switches: RewardSwitches) -> float:
    """Tool-call correctness term (spec "Correctness score").

    0.0 when the GT has no ``<tool_call>``. Otherwise the GT is parsed (errors propagate) and the prediction must
    contain both tags and parse strictly (first block only); any exception while parsing or comparing the
    prediction gives ``cmin``.

    Raises:
        InvalidGroundTruthError: see ``parse_ground_truth_tools``.
    """
    if open_tag(TOOL_CALL) not in ground_truth:
        return 0.0
    gt_tools = parse_ground_truth_tools(ground_truth)
    try:
        pd_tools = strict_tool_calls(prediction, require_close=True)
        return compute_tool_call_reward(gt_tools, pd_tools, cmax, cmin, switches)
    except Exception as err:  # noqa: BLE001 - the reference maps every failure to the minimum (spec)
        logger.debug(
            "rlla correctness: prediction unparseable or malformed (%s: %s) -> min %s", type(err).__name__, err, cmin
        )
        return cmin


def format_reward_in(parsed: Any, prediction: str, ground_truth: str, fmax: float, fmin: float) -> float:
    """The format term for a tool-call format other than ToolRL's (``data.tool_format``; ``docs/rlla_reward.md``
    "Other tool-call formats"): ``fmax`` when the response has the ground truth's shape in ``fmt`` — a call attempted
    and read without failures where the GT calls a tool, no call attempted (and some text) where it does not — else
    ``fmin``. ToolRL's own ``<think>`` / tag layout is not asked for. ``parsed``: ``tool_formats.parse_calls`` of
    ``prediction`` in that format."""
    if open_tag(TOOL_CALL) in ground_truth:
        ok = parsed.attempted and bool(parsed.calls) and not parsed.failures
    else:
        ok = not parsed.attempted and bool(prediction.strip())
    return fmax if ok else fmin


def correctness_reward_in(parsed: Any, ground_truth: str, cmax: float, cmin: float, switches: RewardSwitches) -> float:
    """:func:`correctness_reward` with the calls read by ``fmt``'s parser: 0.0 when the GT has no tool call, ``cmin``
    when the response's calls cannot all be read, else the same matching of names and parameters as ToolRL's.
    ``parsed``: ``tool_formats.parse_calls`` of the prediction in that format.

    Raises:
        InvalidGroundTruthError: see ``parse_ground_truth_tools``.
    """
    if open_tag(TOOL_CALL) not in ground_truth:
        return 0.0
    gt_tools = parse_ground_truth_tools(ground_truth)
    if not parsed.attempted or parsed.parse_failed:
        return cmin
    return compute_tool_call_reward(gt_tools, [dict(c) for c in parsed.calls], cmax, cmin, switches)


def compute_score(
    solution_str: str,
    ground_truth: str,
    step: float = 0,
    wrapper: str | None = None,
    *,
    switches: RewardSwitches | None = None,
    tool_format: str = "toolrl",
) -> tuple[float, float, float, float]:
    """RLLA reward of one decoded sample (spec "How it is called").

    Args:
        solution_str: decoded text: the whole chat (ToolRL: prompt + response, special tokens kept) or a bare
            response; the prediction is the assistant turn (``tool_parse.extract_assistant_turn``).
        ground_truth: the row's ``reward_model.ground_truth``.
        step: trainer global step (0 = validation before training); drives the schedules.
        wrapper: ``"qwen"`` | ``"llama"`` | ``"none"``; None chooses from ``EXPERIMENT_NAME`` like ToolRL.
        switches: snapshot of the switches; None reads the environment now (``RewardSwitches.from_env()``).
        tool_format: how the response's calls are written (``data.tool_format``; ``tool_formats``' registry):
            ``toolrl`` is ToolRL's reward exactly; another format reads the calls with its parser and checks its own
            shape (:func:`format_reward_in`, :func:`correctness_reward_in`). The ground truth is always ToolRL's.

    Returns:
        ``(score, format, correctness, length)`` with score = format + correctness + length; length is 0.0 unless
        WITHLENGTH. Default range [−3, 4].

    Raises:
        UnknownModelWrapperError: no wrapper could be chosen (see ``resolve_wrapper``).
        InvalidGroundTruthError: ``ground_truth`` is not a string or its tool-call block is not JSON lines.
        TypeError: ``solution_str`` is not a string.
    """
    sw = RewardSwitches.from_env() if switches is None else switches
    chosen = resolve_wrapper(wrapper, sw.experiment_name)
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be a str, got {type(solution_str).__name__}")
    if not isinstance(ground_truth, str):
        raise InvalidGroundTruthError(
            f"ground_truth must be a str, got {type(ground_truth).__name__}: {str(ground_truth)[:120]!r}"
        )
    prediction = extract_assistant_turn(solution_str, chosen)
    fmax, fmin = format_range(step, sw)
    cmax, cmin = correctness_range(step, sw)
    if tool_format == "toolrl":
        format_score = format_reward(prediction, ground_truth, fmax, fmin)
        correctness_score = correctness_reward(prediction, ground_truth, cmax, cmin, sw)
    else:
        from verl.utils.reward_score.tool_formats import parse_calls

        parsed = parse_calls(prediction, tool_format)  # read once, for both terms
        format_score = format_reward_in(parsed, prediction, ground_truth, fmax, fmin)
        correctness_score = correctness_reward_in(parsed, ground_truth, cmax, cmin, sw)
    length_score = length_reward(prediction, step, sw) if sw.withlength else 0.0
    score = format_score + correctness_score + length_score
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "rlla step=%s switches=%s wrapper=%s -> score=%s format=%s correctness=%s length=%s",
            step,
            sw.active(),
            chosen,
            score,
            format_score,
            correctness_score,
            length_score,
        )
    return score, format_score, correctness_score, length_score


def answer_of(solution_str: str, wrapper: str | None = None, *, switches=None, tool_format: str = "toolrl") -> str:
    """What one decoded sample answers, as a string that two samples giving the same answer share: the ``pred`` that
    upstream verl's validation votes on for ``maj@N`` (``metric_utils.calc_maj_val``).

    The prediction is the assistant turn, as :func:`compute_score` reads it. Readable tool calls (``data.tool_format``,
    ``tool_formats.parse_calls``) give ``"tool_call:"`` and their JSON (``name`` and ``parameters``, keys sorted, in
    the order written); a call that cannot be read gives ``"unreadable"``; no call gives ``"response:"`` and the
    first ``<response>`` block's text (empty when there is none).

    Raises:
        UnknownModelWrapperError: no wrapper could be chosen (see ``resolve_wrapper``).
    """
    import json

    from verl.utils.reward_score.tool_formats import parse_calls

    sw = RewardSwitches.from_env() if switches is None else switches
    prediction = extract_assistant_turn(
        solution_str if isinstance(solution_str, str) else "", resolve_wrapper(wrapper, sw.experiment_name)
    )
    parsed = parse_calls(prediction, tool_format)
    if parsed.parse_failed:
        return "unreadable"
    if parsed.calls:
        return "tool_call:" + json.dumps(list(parsed.calls), sort_keys=True, ensure_ascii=False)
    return "response:" + (first_block(prediction, RESPONSE) if open_tag(RESPONSE) in prediction else "")
