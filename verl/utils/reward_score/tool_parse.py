"""The one parser for ``<think>`` / ``<tool_call>`` / ``<response>`` text (RLLA format).

Two families of functions live here; pick by what the caller needs:

**Strict, reward-compatible** (``first_block``, ``parse_tool_lines``, ``strict_tool_calls``,
``extract_assistant_turn``). These reproduce the ToolRL reward's parsing exactly, quirks included
(``docs/rlla_reward.md`` "Correctness score"):

- only the *first* ``<tool_call>…</tool_call>`` block is read: the text after the first opening tag, cut at the
  next closing tag (or the end of the text when there is none), stripped;
- the block is split on ``"\\n"`` and every piece goes through ``json.loads``; a blank line, pretty-printed JSON or a
  truncated object therefore fails;
- failures raise ``ToolCallParseError`` (``ToolCallJSONError`` for bad JSON); the reward turns them into its
  minimum for predictions and into ``InvalidGroundTruthError`` for ground truths.

Use these only to score, or to reproduce what the reward saw. Changing them changes rewards.

**Lenient, for analysis** (``find_spans``, ``first_span``, ``extract_tags``, ``parse_tool_calls``, ``tool_usage``).
These never raise on malformed model output: every complete ``<tag>…</tag>`` span is found, every block is read,
pretty-printed JSON and JSON lists are accepted, ``arguments`` is accepted for ``parameters``, and anything
unparseable is counted rather than fatal. Use them to count tool calls per response (router cost, ``docs/router.md``
"Tool usage and cost (after generation)"), to pick the first think / action span (RLVCR, ``docs/rlvcr.md`` "Response
format and parsing"), or for logs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

THINK = "think"
TOOL_CALL = "tool_call"
RESPONSE = "response"
RLLA_TAGS = (THINK, TOOL_CALL, RESPONSE)

# Chat-template markers delimiting the assistant turn (``docs/rlla_reward.md`` "Extracting the prediction").
WRAPPER_MARKERS: dict[str, tuple[str, str]] = {
    "qwen": ("<|im_start|>assistant", "<|im_end|>"),
    "llama": ("<|start_header_id|>assistant<|end_header_id|>", "<|eot_id|>"),
}
WRAPPERS = ("qwen", "llama", "none")


class ToolCallParseError(ValueError):
    """Strict parsing failed: a required tag is missing (or, as ``ToolCallJSONError``, a line is not JSON)."""


class ToolCallJSONError(ToolCallParseError):
    """Line ``line_index`` (0-based) of a strict tool-call block is not valid JSON."""

    def __init__(self, line_index: int, line: str, err: json.JSONDecodeError):
        self.line_index = line_index
        self.line = line
        self.json_error = err
        shown = line if len(line) <= 200 else line[:200] + "..."
        super().__init__(f"line {line_index} of the <tool_call> block is not valid JSON ({err}): {shown!r}")


def open_tag(tag: str) -> str:
    """``"<tag>"``."""
    return f"<{tag}>"


def close_tag(tag: str) -> str:
    """``"</tag>"``."""
    return f"</{tag}>"


# --------------------------------------------------------------------------------------------------------------------
# Strict (reward-compatible)
# --------------------------------------------------------------------------------------------------------------------
def extract_assistant_turn(solution_str: str, wrapper: str) -> str:
    """The assistant's text inside a decoded chat, exactly as the RLLA reward extracts it
    (``docs/rlla_reward.md`` "Extracting the prediction").

    ``"qwen"``: the text after the *last* ``<|im_start|>assistant`` and before the next ``<|im_end|>``;
    ``"llama"``: the same with ``<|start_header_id|>assistant<|end_header_id|>`` / ``<|eot_id|>``;
    ``"none"``: the whole string. The result is stripped. A missing marker means the whole string is used, so a
    bare response gives the same prediction as a wrapped one.

    Raises:
        ValueError: ``wrapper`` is not one of ``"qwen"``, ``"llama"``, ``"none"``.
    """
    if wrapper == "none":
        return solution_str.strip()
    if wrapper not in WRAPPER_MARKERS:
        raise ValueError(f"unknown chat wrapper {wrapper!r}; expected one of {WRAPPERS}")
    start, end = WRAPPER_MARKERS[wrapper]
    return solution_str.split(start)[-1].split(end)[0].strip()


def first_block(text: str, tag: str = TOOL_CALL) -> str:
    """Content of the first ``<tag>`` block the way the reward reads it: the text between the first and the second
    opening tag (or the end), cut at the first closing tag in it, stripped.

    Raises:
        ToolCallParseError: the opening tag does not occur in ``text``.
    """
    opening = open_tag(tag)
    if opening not in text:
        raise ToolCallParseError(f"no {opening} in text")
    return text.split(opening)[1].split(close_tag(tag))[0].strip()


def parse_tool_lines(block: str) -> list[Any]:
    """``json.loads`` of every ``"\\n"``-separated line of a tool-call block (no line is skipped, blank or not).

    Returns whatever JSON values the lines hold (normally dicts with ``name`` and ``parameters``; not validated).

    Raises:
        ToolCallJSONError: a line is not a complete JSON value; carries ``line_index`` (0-based), ``line`` and the
            original ``json.JSONDecodeError`` as ``__cause__``.
    """
    values = []
    for index, line in enumerate(block.split("\n")):
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ToolCallJSONError(index, line, err) from err
    return values


def strict_tool_calls(text: str, require_close: bool = True) -> list[Any]:
    """The reward's parse of a tool-call text: ``parse_tool_lines(first_block(text))``.

    ``require_close=True`` (predictions) also demands that ``</tool_call>`` occurs somewhere in ``text``, as the
    reward asserts; the ground-truth path only needs the opening tag (``require_close=False``).

    Raises:
        ToolCallParseError: a required tag is missing.
        ToolCallJSONError: a line of the first block is not valid JSON.
    """
    if require_close and close_tag(TOOL_CALL) not in text:
        raise ToolCallParseError(f"no {close_tag(TOOL_CALL)} in text")
    return parse_tool_lines(first_block(text, TOOL_CALL))


# --------------------------------------------------------------------------------------------------------------------
# Lenient (analysis)
# --------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TagSpan:
    """One complete ``<tag>content</tag>`` occurrence.

    ``start``/``end`` are character offsets of the whole span, tags included (``text[start:end]``);
    ``content_start``/``content_end`` delimit the raw (unstripped) content.
    """

    tag: str
    content: str
    start: int
    end: int
    content_start: int
    content_end: int


_SPAN_RE_CACHE: dict[str, re.Pattern] = {}


def _span_re(tag: str) -> re.Pattern:
    if tag not in _SPAN_RE_CACHE:
        _SPAN_RE_CACHE[tag] = re.compile(re.escape(open_tag(tag)) + r"(.*?)" + re.escape(close_tag(tag)), re.DOTALL)
    return _SPAN_RE_CACHE[tag]


def find_spans(text: str, tag: str) -> list[TagSpan]:
    """All complete, non-overlapping ``<tag>…</tag>`` spans in order (shortest match each; an unclosed trailing tag
    is ignored). Never raises on model output."""
    return [TagSpan(tag, m.group(1), m.start(), m.end(), m.start(1), m.end(1)) for m in _span_re(tag).finditer(text)]


def first_span(text: str, tag: str) -> TagSpan | None:
    """The first complete ``<tag>…</tag>`` span, or ``None``."""
    m = _span_re(tag).search(text)
    return None if m is None else TagSpan(tag, m.group(1), m.start(), m.end(), m.start(1), m.end(1))


def extract_tags(text: str, tags: tuple[str, ...] = RLLA_TAGS) -> dict[str, list[str]]:
    """``{tag: [stripped content of every complete span]}`` for each tag in ``tags`` (empty list when absent)."""
    return {tag: [s.content.strip() for s in find_spans(text, tag)] for tag in tags}


def _normalize_call(obj: Any) -> dict | None:
    """A ``{"name": str, "parameters": dict}`` view of one decoded call, or None if it is not a call."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    params = obj.get("parameters", obj.get("arguments", {}))
    if isinstance(params, str):  # OpenAI-style JSON-encoded arguments
        try:
            params = json.loads(params)
        except json.JSONDecodeError:
            return None
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return None
    return {"name": obj["name"], "parameters": params}


def _decode_block(block: str) -> tuple[list[dict], int]:
    """Calls in one block and the number of items that could not be read as calls."""
    lines = [line for line in block.strip().split("\n") if line.strip()]
    items: list[Any] = []
    try:
        items = [json.loads(line) for line in lines]
    except json.JSONDecodeError:
        try:  # pretty-printed object, or a JSON list of calls
            whole = json.loads(block)
        except json.JSONDecodeError:
            return [], 1
        items = [whole]
    items = [x for item in items for x in (item if isinstance(item, list) else [item])]  # JSON lists of calls
    calls, invalid = [], 0
    for item in items:
        call = _normalize_call(item)
        if call is None:
            invalid += 1
        else:
            calls.append(call)
    return calls, invalid


def _collect_calls(text: str) -> tuple[int, list[dict], int]:
    """(number of complete blocks, readable calls in order, unreadable item count) over all blocks."""
    spans = find_spans(text, TOOL_CALL)
    calls: list[dict] = []
    invalid = 0
    for span in spans:
        block_calls, bad = _decode_block(span.content)
        calls.extend(block_calls)
        invalid += bad
    return len(spans), calls, invalid


def parse_tool_calls(text: str) -> list[dict]:
    """Every readable tool call in every complete ``<tool_call>`` block of ``text``, in order.

    Returns:
        list of ``{"name": str, "parameters": dict}``. Unreadable items are dropped (``tool_usage`` counts them).
        Never raises on model output.
    """
    return _collect_calls(text)[1]


@dataclass(frozen=True)
class ToolUsage:
    """Tool usage of one response (lenient parse).

    Attributes:
        num_blocks: complete ``<tool_call>`` blocks.
        num_calls: readable calls over all blocks.
        num_invalid: items (or whole blocks) that could not be read as a call.
        names: called tool names in order (repeats kept).
        counts: ``{name: number of calls}``.
        has_tool_call_tag: ``<tool_call>`` occurs at all (even unclosed or unreadable).
    """

    num_blocks: int
    num_calls: int
    num_invalid: int
    names: tuple[str, ...]
    counts: dict[str, int] = field(default_factory=dict)
    has_tool_call_tag: bool = False

    @property
    def used_any_tool(self) -> bool:
        """At least one readable call."""
        return self.num_calls > 0

    @property
    def parse_failed(self) -> bool:
        """``<tool_call>`` occurs but no complete block does, or some block item is not a readable call."""
        return self.has_tool_call_tag and (self.num_blocks == 0 or self.num_invalid > 0)


def tool_usage(text: str) -> ToolUsage:
    """Summarise the tool calls of one response with the lenient parser (for router costs and metrics)."""
    num_blocks, calls, invalid = _collect_calls(text)
    names = tuple(c["name"] for c in calls)
    return ToolUsage(
        num_blocks=num_blocks,
        num_calls=len(calls),
        num_invalid=invalid,
        names=names,
        counts=dict(Counter(names)),
        has_tool_call_tag=open_tag(TOOL_CALL) in text,
    )
