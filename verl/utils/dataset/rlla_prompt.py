"""The RLLA prompt format, so that other benchmarks (BFCL) can be asked in exactly the format a model trained on RLLA
rows has learned.

Every RLLA row (ToolRL's processed train/test splits, ``data/rlla_4k`` of the shared reference folder located by
``$TOOLRL_SHARED``) has the same system message except for its tool list: :data:`SYSTEM_HEAD` + the numbered tool
entries + :data:`SYSTEM_TAIL`. A tool entry is::

    <n>. Name: <name>
    Description: <description>
    Parameters: <json.dumps of {parameter: {"description": ..., "type": ..., ...}}>

and the user message is the dialogue history, ``**Dialogue Records History**`` followed by ``<user> … </user>``,
``<response> … </response>`` (earlier assistant turns) and ``<obs> … </obs>`` (tool results) lines. The strings below
are the data's own (tested against every row of the shared splits: re-rendering a row's parsed tools reproduces its
system message byte for byte).
"""
from __future__ import annotations

import json
from typing import Iterable, Mapping, Sequence

SYSTEM_HEAD = (
    "You are a helpful multi-turn dialogue assistant capable of leveraging tool calls to solve user tasks and provide "
    "structured chat responses.\n\n**Available Tools**\nIn your response, you can use the following tools:\n"
)
SYSTEM_TAIL = (
    "\n\n**Steps for Each Turn**\n"
    "1. **Think:** Recall relevant context and analyze the current user goal.\n"
    "2. **Decide on Tool Usage:** If a tool is needed, specify the tool and its parameters.\n"
    "3. **Respond Appropriately:** If a response is needed, generate one while maintaining consistency across user "
    "queries.\n\n"
    "**Output Format**\n```plaintext\n<think> Your thoughts and reasoning </think>\n<tool_call>\n"
    '{"name": "Tool name", "parameters": {"Parameter name": "Parameter content", "... ...": "... ..."}}\n'
    '{"name": "... ...", "parameters": {"... ...": "... ...", "... ...": "... ..."}}\n'
    "...\n</tool_call>\n<response> AI's final response </response>\n```\n\n"
    "**Important Notes**\n"
    "1. You must always include the `<think>` field to outline your reasoning. Provide at least one of `<tool_call>` or "
    "`<response>`. Decide whether to use `<tool_call>` (possibly multiple times), `<response>`, or both.\n"
    "2. You can invoke multiple tool calls simultaneously in the `<tool_call>` fields. Each tool call should be a JSON "
    'object with a "name" field and an "parameters" field containing a dictionary of parameters. If no parameters are '
    'needed, leave the "parameters" field an empty dictionary.\n'
    "3. Refer to the previous dialogue records in the history, including the user's queries, previous `<tool_call>`, "
    "`<response>`, and any tool feedback noted as `<obs>` (if exists)."
)
HISTORY_HEADER = "**Dialogue Records History**"


def render_tool(number: int, name: str, description: str, parameters: Mapping | str) -> str:
    """One numbered tool entry; ``parameters`` is the ``{name: {description, type, ...}}`` mapping (``json.dumps`` with
    default separators, as in the data) or an already rendered string."""
    params = parameters if isinstance(parameters, str) else json.dumps(parameters, ensure_ascii=False)
    return f"{number}. Name: {name}\nDescription: {description}\nParameters: {params}"


def render_system(tools: Sequence[tuple[str, str, Mapping | str]], extra: str = "") -> str:
    """The RLLA system message for ``tools`` (``(name, description, parameters)`` triples, numbered from 1).

    ``extra`` (e.g. a benchmark's own system instruction) is appended after a blank line; empty: nothing added.
    """
    entries = "\n".join(render_tool(i, *tool) for i, tool in enumerate(tools, start=1))
    text = SYSTEM_HEAD + entries + SYSTEM_TAIL
    return f"{text}\n\n{extra.strip()}" if extra.strip() else text


def render_history(messages: Iterable[Mapping]) -> str:
    """The RLLA user message for a chat: ``user`` → ``<user> … </user>``, ``assistant`` → ``<response> … </response>``,
    ``tool`` → ``<obs> … </obs>``, under :data:`HISTORY_HEADER`; turns are separated by a blank line as in the data.

    Raises:
        ValueError: a message has another role (system messages belong in :func:`render_system`'s ``extra``) or
            non-string content.
    """
    tags = {"user": "user", "assistant": "response", "tool": "obs"}
    lines = []
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in tags:
            raise ValueError(f"message {i}: role {role!r} cannot be rendered into the history "
                             f"(expected one of {sorted(tags)})")
        if not isinstance(content, str):
            raise ValueError(f"message {i}: content: expected a string, got {type(content).__name__}")
        lines.append(f"<{tags[role]}> {content.strip()} </{tags[role]}>")
    return HISTORY_HEADER + "\n" + "\n\n".join(lines)
