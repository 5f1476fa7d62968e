"""Tool-call formats beyond ToolRL's: one registry of parsers and renderers for what instruct models actually emit.

ToolRL's format (``toolrl``, the default everywhere) is a ``<tool_call>`` block holding one JSON object per line,
``{"name": ..., "parameters": {...}}`` (``docs/rlla_reward.md``). The others:

- ``hermes`` (Hermes / Qwen2.5 / Qwen3 chat templates): one ``<tool_call>`` block per call holding
  ``{"name": ..., "arguments": {...}}``;
- ``llama3`` (Llama 3.1 / 3.2 JSON tool calling): the turn is the JSON call itself, ``{"name": ..., "parameters":
  {...}}``, optionally after ``<|python_tag|>``; several calls are separated by ``;`` or new lines, or given as a
  JSON list;
- ``mistral`` (Mistral / Mixtral v3 tokenizers and later): ``[TOOL_CALLS]`` followed by a JSON list of
  ``{"name": ..., "arguments": {...}}``, or (v11+ templates) ``[TOOL_CALLS]name[ARGS]{...}`` repeated.

Every parser is lenient and never raises on model output: it returns a :class:`ParsedCalls` with the readable calls
(``{"name": str, "parameters": dict}``, the same shape as ``tool_parse.parse_tool_calls``), whether the response
attempted a call at all, and one reason per part it could not read. :func:`detect_tool_format` picks the format from a
chat template; :func:`tool_schema` turns an OpenAI function spec or a Python function (its signature and docstring,
through ``transformers.utils.get_json_schema``) into the spec a chat template renders with ``tools=[...]``.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from verl.utils.reward_score.tool_parse import TOOL_CALL, ToolUsage, _normalize_call, find_spans, open_tag, tool_usage

__all__ = [
    "TOOL_FORMATS",
    "ParsedCalls",
    "detect_tool_format",
    "format_tool_usage",
    "get_tool_format",
    "parse_calls",
    "register_tool_format",
    "render_calls",
    "resolve_tool_format",
    "tool_schema",
]


@dataclass(frozen=True)
class ParsedCalls:
    """What one response called.

    Attributes:
        calls: readable calls in order, each ``{"name": str, "parameters": dict}``.
        attempted: the response carries the format's call marker (or, for ``llama3``, starts like a JSON call).
        failures: one reason per part that could not be read as a call.
    """

    calls: tuple
    attempted: bool
    failures: tuple = ()

    @property
    def parse_failed(self) -> bool:
        """A call was attempted but some part of it could not be read (or nothing could)."""
        return self.attempted and (bool(self.failures) or not self.calls)


@dataclass(frozen=True)
class ToolFormat:
    """A registered format: ``parse(text) -> ParsedCalls`` and ``render(calls) -> str`` (the inverse on readable
    calls)."""

    name: str
    parse: Callable[[str], ParsedCalls]
    render: Callable[[list], str]


TOOL_FORMATS: Dict[str, ToolFormat] = {}


def register_tool_format(name: str, render: Callable[[list], str]) -> Callable:
    """Decorator registering ``parse`` under ``name`` with its ``render``."""

    def decorator(parse: Callable[[str], ParsedCalls]) -> Callable[[str], ParsedCalls]:
        TOOL_FORMATS[name] = ToolFormat(name, parse, render)
        return parse

    return decorator


def get_tool_format(name: str) -> ToolFormat:
    """The format registered under ``name``. Raises ValueError listing the registered ones."""
    if name not in TOOL_FORMATS:
        raise ValueError(f"unknown tool-call format {name!r}; registered: {sorted(TOOL_FORMATS)}")
    return TOOL_FORMATS[name]


def parse_calls(text: str, fmt: str = "toolrl") -> ParsedCalls:
    """The calls of ``text`` in format ``fmt`` (never raises on model output; ValueError for an unknown format)."""
    return get_tool_format(fmt).parse(text if isinstance(text, str) else "")


def render_calls(calls: list, fmt: str = "toolrl") -> str:
    """``calls`` (``{"name", "parameters"}``) as format ``fmt`` writes them."""
    return get_tool_format(fmt).render(list(calls))


def _read_items(items: list, where: str) -> tuple[list, list]:
    calls, failures = [], []
    for k, item in enumerate(items):
        call = _normalize_call(item)
        if call is None:
            failures.append(f"{where} item {k}: not a {{name, parameters|arguments}} object: {str(item)[:80]!r}")
        else:
            calls.append(call)
    return calls, failures


def _json_items(text: str) -> tuple[Optional[list], Optional[str]]:
    """The JSON values of ``text``: one value (a list is expanded), else one per non-blank line; (None, reason)."""
    try:
        value = json.loads(text)
        return (value if isinstance(value, list) else [value]), None
    except json.JSONDecodeError:
        pass
    items = []
    for line in (x.strip() for x in text.split("\n")):
        if not line:
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            return None, f"not JSON ({err.msg} at line {err.lineno} col {err.colno}): {line[:80]!r}"
        items.extend(value if isinstance(value, list) else [value])
    return items, None


def _tagged_blocks(text: str) -> ParsedCalls:
    attempted = open_tag(TOOL_CALL) in text
    spans = find_spans(text, TOOL_CALL)
    calls, failures = [], []
    for b, span in enumerate(spans):
        items, reason = _json_items(span.content.strip())
        if items is None:
            failures.append(f"<tool_call> block {b}: {reason}")
            continue
        got, bad = _read_items(items, f"<tool_call> block {b}")
        calls += got
        failures += bad
    if attempted and text.count(open_tag(TOOL_CALL)) > len(spans):
        failures.append("a <tool_call> block is not closed")
    return ParsedCalls(tuple(calls), attempted, tuple(failures))


def _render_toolrl(calls: list) -> str:
    lines = "\n".join(json.dumps({"name": c["name"], "parameters": c.get("parameters", {})}) for c in calls)
    return f"<tool_call>\n{lines}\n</tool_call>"


def _render_hermes(calls: list) -> str:
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': c['name'], 'arguments': c.get('parameters', {})})}\n</tool_call>"
        for c in calls
    )


@register_tool_format("toolrl", _render_toolrl)
def _parse_toolrl(text: str) -> ParsedCalls:
    """ToolRL / RLLA: ``<tool_call>`` blocks of JSON lines (pretty-printed JSON and lists accepted)."""
    return _tagged_blocks(text)


@register_tool_format("hermes", _render_hermes)
def _parse_hermes(text: str) -> ParsedCalls:
    """Hermes / Qwen: one ``<tool_call>`` block per call with ``arguments`` (``parameters`` accepted)."""
    return _tagged_blocks(text)


PYTHON_TAG = "<|python_tag|>"


def _render_llama3(calls: list) -> str:
    return "; ".join(json.dumps({"name": c["name"], "parameters": c.get("parameters", {})}) for c in calls)


@register_tool_format("llama3", _render_llama3)
def _parse_llama3(text: str) -> ParsedCalls:
    """Llama 3.x JSON calls: the turn (after ``<|python_tag|>``) is a call, calls separated by ``;`` or lines."""
    body = text.replace("<|eot_id|>", "").replace("<|eom_id|>", "")
    tagged = PYTHON_TAG in body
    body = body.split(PYTHON_TAG, 1)[1] if tagged else body
    body = body.strip()
    attempted = tagged or body.startswith(("{", "["))
    if not attempted:
        return ParsedCalls((), False)
    items, _reason = _json_items(body)
    if items is None:  # "; "-separated objects
        items, failures = [], []
        for k, part in enumerate(p.strip() for p in body.split(";")):
            if not part:
                continue
            try:
                items.append(json.loads(part))
            except json.JSONDecodeError as err:
                failures.append(f"call {k}: not JSON ({err.msg}): {part[:80]!r}")
        calls, bad = _read_items(items, "call")
        return ParsedCalls(tuple(calls), True, tuple(failures + bad))
    calls, bad = _read_items(items, "call")
    return ParsedCalls(tuple(calls), True, tuple(bad))


TOOL_CALLS_TAG, ARGS_TAG = "[TOOL_CALLS]", "[ARGS]"
_MISTRAL_END = re.compile(r"</s>\s*$")


def _render_mistral(calls: list) -> str:
    return TOOL_CALLS_TAG + json.dumps([{"name": c["name"], "arguments": c.get("parameters", {})} for c in calls])


@register_tool_format("mistral", _render_mistral)
def _parse_mistral(text: str) -> ParsedCalls:
    """Mistral: ``[TOOL_CALLS]`` then a JSON list of calls, or ``[TOOL_CALLS]name[ARGS]{...}`` repeated."""
    if TOOL_CALLS_TAG not in text:
        return ParsedCalls((), False)
    calls, failures = [], []
    for k, part in enumerate(text.split(TOOL_CALLS_TAG)[1:]):
        part = _MISTRAL_END.sub("", part).strip()
        if ARGS_TAG in part:  # v11+: name[ARGS]{json}
            name, _, args = part.partition(ARGS_TAG)
            try:
                item = {"name": name.strip(), "arguments": json.loads(args)}
            except json.JSONDecodeError as err:
                failures.append(f"[TOOL_CALLS] {k}: arguments are not JSON ({err.msg}): {args[:80]!r}")
                continue
            got, bad = _read_items([item], f"[TOOL_CALLS] {k}")
        else:
            items, reason = _json_items(part)
            if items is None:
                failures.append(f"[TOOL_CALLS] {k}: {reason}")
                continue
            got, bad = _read_items(items, f"[TOOL_CALLS] {k}")
        calls += got
        failures += bad
    return ParsedCalls(tuple(calls), True, tuple(failures))


def detect_tool_format(chat_template: Optional[str]) -> str:
    """The format a chat template's tool calls use: ``mistral`` (``[TOOL_CALLS]``), ``llama3``
    (``<|python_tag|>`` or an ``ipython`` role), ``hermes`` (``<tool_call>``), else ``toolrl``."""
    template = chat_template or ""
    if TOOL_CALLS_TAG in template:
        return "mistral"
    if PYTHON_TAG in template or "ipython" in template:
        return "llama3"
    if open_tag(TOOL_CALL) in template:
        return "hermes"
    return "toolrl"


def resolve_tool_format(name: str, tokenizer: Any = None) -> str:
    """``data.tool_format``: a registered format as it is, or ``auto``: :func:`detect_tool_format` on the tokenizer's
    chat template (``toolrl`` without a tokenizer or template).

    Raises:
        ValueError: neither ``auto`` nor a registered format (the message lists them).
    """
    if name == "auto":
        return detect_tool_format(getattr(tokenizer, "chat_template", None))
    get_tool_format(name)
    return name


def format_tool_usage(text: str, fmt: str = "toolrl") -> ToolUsage:
    """Tool usage of one response in ``fmt``, the summary the router's cost and the tool-call metrics read:
    ``toolrl`` is ``tool_parse.tool_usage`` itself; another format counts its parsed calls, one unreadable part per
    failure, and ``has_tool_call_tag`` when the response attempted a call in that format."""
    if fmt == "toolrl":
        return tool_usage(text)
    parsed = parse_calls(text, fmt)
    names = tuple(c["name"] for c in parsed.calls)
    counts: Dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ToolUsage(
        num_blocks=int(parsed.attempted and bool(parsed.calls)),
        num_calls=len(names),
        num_invalid=len(parsed.failures),
        names=names,
        counts=counts,
        has_tool_call_tag=parsed.attempted,
    )


def tool_schema(tool: Any) -> dict:
    """An OpenAI-style function spec ``{"type": "function", "function": {"name", "description", "parameters"}}``
    from such a spec (checked; a bare ``{"name", ...}`` is wrapped) or from a Python function (its signature and
    Google-style docstring, via ``transformers.utils.get_json_schema``, as TRL does).

    Raises:
        TypeError: neither a mapping nor a function. ValueError: a spec without a string ``name``, or a function
            ``transformers`` cannot describe (its message says which argument lacks a type or description).
    """
    if callable(tool) and (inspect.isfunction(tool) or inspect.ismethod(tool)):
        from transformers.utils import get_json_schema

        try:
            return get_json_schema(tool)
        except Exception as err:  # noqa: BLE001 - transformers raises its own error types
            raise ValueError(f"tool {getattr(tool, '__name__', tool)!r}: {err}") from err
    if not isinstance(tool, dict):
        raise TypeError(
            f"a tool must be an OpenAI function spec (dict) or a Python function, got {type(tool).__name__}"
        )
    function = tool.get("function", tool) if tool.get("type", "function") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError(f"tool spec without a string function name: {json.dumps(tool)[:120]}")
    return {
        "type": "function",
        "function": {
            "name": function["name"],
            "description": function.get("description", ""),
            "parameters": function.get("parameters", {"type": "object", "properties": {}}),
        },
    }
