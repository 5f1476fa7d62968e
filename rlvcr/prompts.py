"""RLVCR text side: level-aware prompt templates, the response parser and the context builders.

Documentation: ``docs/rlvcr.md`` (cited below as "docs"), sections "Response format and parsing", "Level-aware
prompts" and "Rollout phase" (the four thinking levels, the alternative contexts truncated before the action).
A response is::

    <level>N</level><think>T</think><action>a</action>          (agent envs, ``AGENT_FORMAT``)
    <level>N</level><think>T</think>\\n<tool_call>\\n...\\n</tool_call>   (RLLA tool use, ``RLLA_FORMAT``)

``N`` in ``1..num_levels``; level 1 has no think block, or an empty one (RLLA always writes ``<think></think>`` so
that ToolRL's format rule, which demands a think block, still holds once :func:`strip_level_tag` has removed the level
tag). The action span is the first of ``action_tags`` with a complete span after the think (docs "Response format and
parsing").

Everything here is pure string processing; spans are found with ``verl.utils.reward_score.tool_parse``'s lenient
``first_span`` (the project's one tag parser).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from verl.utils.reward_score.tool_parse import (
    RESPONSE,
    THINK,
    TOOL_CALL,
    WRAPPER_MARKERS,
    TagSpan,
    close_tag,
    first_span,
    open_tag,
)

__all__ = [
    "AGENT_FORMAT",
    "LEVEL",
    "LEVEL_DESCRIPTIONS",
    "RLLA_FORMAT",
    "LevelFormat",
    "ParsedStep",
    "add_level_guide",
    "agent_prompt",
    "alternative_instruction",
    "check_action_tags",
    "cut_alternative_think",
    "generation_prefix",
    "level_context",
    "level_guide",
    "level_scored_compute_score",
    "parse_level_response",
    "strip_level_tag",
]

LEVEL = "level"
_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_LEVEL_VALUE = re.compile(r"[0-9]+")


def check_action_tags(action_tags: Sequence[str]) -> Tuple[str, ...]:
    """``action_tags`` as a tuple after validation (``algorithm.rlvcr.action_tags``).

    Raises ValueError: empty, a name that is not a plain tag name (``[A-Za-z_][A-Za-z0-9_-]*``), ``level`` or
        ``think``, or a repeated name.
    """
    if isinstance(action_tags, str):
        raise ValueError(f"algorithm.rlvcr.action_tags must be a list of tag names, got the string {action_tags!r}")
    tags = tuple(str(t) for t in action_tags)
    if not tags:
        raise ValueError("algorithm.rlvcr.action_tags must name at least one tag")
    for tag in tags:
        if not _TAG_NAME.fullmatch(tag) or tag in (LEVEL, THINK):
            raise ValueError(f"algorithm.rlvcr.action_tags: {tag!r} is not a usable action tag name")
    if len(set(tags)) != len(tags):
        raise ValueError(f"algorithm.rlvcr.action_tags repeats a name: {list(tags)}")
    return tags


@dataclass(frozen=True)
class LevelFormat:
    """How responses are laid out for one kind of task.

    ``action_tags``: candidate action tags in priority order; ``num_levels``: N; ``level1_empty_think``: level 1
    writes ``<think></think>`` (True) or no think block (False); ``think_action_sep``: text between ``</think>`` and
    the action's opening tag (ToolRL's format puts a newline there).
    """

    action_tags: Tuple[str, ...] = ("action",)
    num_levels: int = 4
    level1_empty_think: bool = False
    think_action_sep: str = ""

    def __post_init__(self):
        object.__setattr__(self, "action_tags", check_action_tags(self.action_tags))
        if int(self.num_levels) < 2:
            raise ValueError(f"num_levels must be >= 2, got {self.num_levels}")


AGENT_FORMAT = LevelFormat(("action",), 4, level1_empty_think=False, think_action_sep="")
RLLA_FORMAT = LevelFormat((TOOL_CALL, RESPONSE), 4, level1_empty_think=True, think_action_sep="\n")

# -------------------- templates --------------------------------------------------------------------------------------
LEVEL_DESCRIPTIONS: Dict[int, str] = {
    1: "act at once, without any reasoning",
    2: "a quick check: one short sentence about the current situation",
    3: "a reasoned step: a few sentences linking the goal, what you observe and the next move",
    4: "a deep analysis: the goal, the current state, the possible moves and why the chosen one is best",
}


def _describe(level: int) -> str:
    return LEVEL_DESCRIPTIONS.get(level, f"reasoning more thorough than level {level - 1}")


def _format_line(fmt: LevelFormat) -> str:
    tag = fmt.action_tags[0]
    if fmt.action_tags == (TOOL_CALL, RESPONSE):
        return (
            f"<level>N</level><think> your reasoning </think>{fmt.think_action_sep}<tool_call>\n{{...}}\n"
            f"</tool_call> and/or <response> ... </response>"
        )
    return f"<level>N</level><think>your reasoning</think>{fmt.think_action_sep}<{tag}>your {tag}</{tag}>"


def level_guide(fmt: LevelFormat = AGENT_FORMAT) -> str:
    """Instruction block describing the thinking levels and the response layout of ``fmt`` (appended to an env's or
    a dataset's prompt)."""
    lines = [
        f"**Thinking Level**\nBefore every response choose how much to think, a level from 1 to "
        f"{fmt.num_levels}, and write it first as <level>N</level>:"
    ]
    lines += [f"- Level {n}: {_describe(n)}." for n in range(1, fmt.num_levels + 1)]
    level1 = "write an empty think block, <think></think>" if fmt.level1_empty_think else "leave out the think block"
    lines.append(f"At level 1 {level1}. Thinking costs tokens: pick the lowest level that still lets you act well.")
    lines.append(f"Layout: {_format_line(fmt)}")
    return "\n".join(lines)


def agent_prompt(task: str, observation: str, history: str = "", fmt: LevelFormat = AGENT_FORMAT) -> str:
    """Prompt of one agent-env step: task, optional history, current observation, then :func:`level_guide`."""
    parts = [f"Task: {task.strip()}"]
    if history.strip():
        parts.append(f"History:\n{history.strip()}")
    parts.append(f"Current observation:\n{observation.strip()}")
    parts.append(level_guide(fmt))
    return "\n\n".join(parts)


def add_level_guide(messages: List[Dict[str, str]], fmt: LevelFormat = RLLA_FORMAT) -> List[Dict[str, str]]:
    """A copy of chat ``messages`` whose system message ends with :func:`level_guide` (a system message is inserted
    first when there is none); the other messages are unchanged. For RLLA rows, whose system prompt already
    describes ToolRL's ``<think>``/``<tool_call>``/``<response>`` format."""
    out = [dict(m) for m in messages]
    guide = level_guide(fmt)
    for message in out:
        if message.get("role") == "system":
            message["content"] = f"{message.get('content', '').rstrip()}\n\n{guide}"
            return out
    return [{"role": "system", "content": guide}] + out


def alternative_instruction(level: int, fmt: LevelFormat = AGENT_FORMAT) -> str:
    """Level-specific instruction used when sampling the alternative think ``T_L`` (docs "Rollout phase", step 1).

    Raises ValueError: ``level`` outside ``2..num_levels`` (level 1 has no think to sample).
    """
    if not 2 <= level <= fmt.num_levels:
        raise ValueError(f"alternative thinks exist for levels 2..{fmt.num_levels}, got {level}")
    return f"Think at level {level}: {_describe(level)}."


# -------------------- parsing ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParsedStep:
    """One parsed response. ``parseable`` False: ``reason`` says why and the other fields are best-effort.

    ``level``: int or None; ``think``: raw think content ("" without a think block); ``has_think``;
    ``action_tag``/``action``: the chosen action span's tag and raw content; ``action_start``/``action_end``: character
    offsets of that content (``text[:action_start]`` is the original context c_l, ending with the opening tag).
    """

    parseable: bool
    reason: str = ""
    level: Optional[int] = None
    think: str = ""
    has_think: bool = False
    action_tag: Optional[str] = None
    action: str = ""
    action_start: int = -1
    action_end: int = -1


def _span_after(text: str, tag: str, pos: int) -> Optional[TagSpan]:
    span = first_span(text[pos:], tag)
    if span is None:
        return None
    return TagSpan(
        tag, span.content, span.start + pos, span.end + pos, span.content_start + pos, span.content_end + pos
    )


def _first_action(text: str, tags: Sequence[str], pos: int) -> Optional[TagSpan]:
    for tag in tags:
        span = _span_after(text, tag, pos)
        if span is not None:
            return span
    return None


def parse_level_response(text: str, action_tags: Sequence[str] = ("action",), num_levels: int = 4) -> ParsedStep:
    """Parse ``<level>N</level>[<think>T</think>]<tag>a</tag>`` (docs "Response format and parsing").

    Rules: the first complete ``<level>`` span gives N (decimal digits, surrounding whitespace allowed); the think is
    the first complete ``<think>`` span after it that starts before the first action span; the action is the first
    tag of ``action_tags`` (priority order) with a complete span after the think (after the level tag when there is
    no think). Searching forward keeps a tag quoted inside the think from being taken as the action.

    Unparseable (``parseable=False``, ``reason`` set): no level tag; N not an integer in ``1..num_levels``; no
    complete action span; an empty (whitespace-only) action; level 1 with a non-empty think (T_1 is empty, docs
    "Response format and parsing"); level >= 2 without a non-empty think (a step could otherwise claim a high level
    while paying no thinking cost).

    Raises TypeError: ``text`` is not a ``str``. ValueError: invalid ``action_tags``.
    """
    if not isinstance(text, str):
        raise TypeError(f"response must be a str, got {type(text).__name__}")
    tags = check_action_tags(action_tags)
    level_span = first_span(text, LEVEL)
    if level_span is None:
        return ParsedStep(False, "no <level>...</level> tag")
    raw = level_span.content.strip()
    if not _LEVEL_VALUE.fullmatch(raw):
        return ParsedStep(False, f"level {raw!r} is not an integer")
    level = int(raw)
    if not 1 <= level <= num_levels:
        return ParsedStep(False, f"level {level} outside 1..{num_levels}", level=level)
    think = _span_after(text, THINK, level_span.end)
    action = _first_action(text, tags, level_span.end)
    if think is not None and (action is None or think.start < action.start):
        action = _first_action(text, tags, think.end)
    else:
        think = None
    think_text = "" if think is None else think.content
    fields = dict(level=level, think=think_text, has_think=think is not None)
    if action is None:
        return ParsedStep(False, f"no complete action span ({', '.join(tags)})", **fields)
    fields.update(
        action_tag=action.tag, action=action.content, action_start=action.content_start, action_end=action.content_end
    )
    if not action.content.strip():
        return ParsedStep(False, "empty action", **fields)
    if level == 1 and think_text.strip():
        return ParsedStep(False, "level 1 with a non-empty think", **fields)
    if level > 1 and not think_text.strip():
        return ParsedStep(False, f"level {level} without a think", **fields)
    return ParsedStep(True, "", **fields)


_LEADING_LEVEL = re.compile(r"(\s*)<level>[^<]*</level>\s*")


def strip_level_tag(text: str) -> str:
    """``text`` without the level tag that opens the assistant turn, so the RLLA reward sees ToolRL's format.

    The assistant turn starts after the last chat-template assistant marker (``tool_parse.WRAPPER_MARKERS``: Qwen/
    ChatML or Llama 3) or, without one, at the start of ``text`` (a bare response). A ``<level>…</level>`` tag at the
    start of the turn (after whitespace) is removed with the whitespace that follows it; the whitespace before it is
    kept. A level tag anywhere else stays (and fails ToolRL's format check, as a misplaced tag should), as does the
    prompt's text (which may quote the format).
    """
    start = max((text.rfind(m[0]) + len(m[0]) if m[0] in text else 0) for m in WRAPPER_MARKERS.values())
    match = _LEADING_LEVEL.match(text, start)
    if match is None:
        return text
    return text[:start] + match.group(1) + text[match.end() :]


def level_scored_compute_score(compute_score):
    """Wrap a ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw)`` function (e.g.
    ``verl.utils.reward_score.default_compute_score``) so that it scores :func:`strip_level_tag` of the solution."""

    def scored(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        return compute_score(
            data_source=data_source,
            solution_str=strip_level_tag(solution_str),
            ground_truth=ground_truth,
            extra_info=extra_info,
            **kwargs,
        )

    scored.__name__ = f"level_stripped_{getattr(compute_score, '__name__', 'compute_score')}"
    return scored


# -------------------- alternative contexts ---------------------------------------------------------------------------
def _level_tag(level: int, fmt: LevelFormat) -> str:
    if not 1 <= level <= fmt.num_levels:
        raise ValueError(f"level must be in 1..{fmt.num_levels}, got {level}")
    return f"{open_tag(LEVEL)}{level}{close_tag(LEVEL)}"


def generation_prefix(level: int, fmt: LevelFormat = AGENT_FORMAT) -> str:
    """Forced prefix appended to the history to sample ``T_L`` (docs "Rollout phase", step 1):
    ``<level>L</level><think>``; generation stops at ``</think>``. Raises ValueError: ``level`` outside
    ``2..num_levels``."""
    if level < 2:
        raise ValueError(f"level 1 has no think to generate (got level {level})")
    return _level_tag(level, fmt) + open_tag(THINK)


def cut_alternative_think(generated: str) -> str:
    """The think text of a generation started from :func:`generation_prefix`: everything before the first
    ``</think>`` (all of it when the budget ran out first)."""
    return generated.split(close_tag(THINK), 1)[0]


def level_context(level: int, think: str, action_tag: str, fmt: LevelFormat = AGENT_FORMAT) -> str:
    """The response-side part of context c_L (docs "Rollout phase", step 2), appended to the history h:
    ``<level>L</level>`` + ``<think>T_L</think>`` + ``fmt.think_action_sep`` + ``<action_tag>``.

    Level 1 has no think block (``<think></think>`` when ``fmt.level1_empty_think``; ``think`` is then ignored).
    For the original level use ``text[:parsed.action_start]`` instead, so that c_l is exactly what was generated.

    Raises ValueError: ``level`` outside ``1..num_levels``; ``action_tag`` not in ``fmt.action_tags``.
    """
    if action_tag not in fmt.action_tags:
        raise ValueError(f"action tag {action_tag!r} is not one of {fmt.action_tags}")
    out = _level_tag(level, fmt)
    if level > 1 or fmt.level1_empty_think:
        body = think if level > 1 else ""
        out += f"{open_tag(THINK)}{body}{close_tag(THINK)}{fmt.think_action_sep}"
    return out + open_tag(action_tag)
