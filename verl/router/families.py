"""Tool families: the RLLA ``**Available Tools**`` block, a keyword heuristic, and the sidecar override file.

Block format (every row of the RLLA splits and of ToolRL's SFT data; ``docs/router.md`` "Tool families")::

    **Available Tools**
    In your response, you can use the following tools:
    1. Name: GetNews
    Description: Retrieve Azure news articles
    Parameters: {"page": {"description": "...", "type": "int", "default": ""}}
    2. Name: ...

    **Steps for Each Turn**

The block runs from the ``**Available Tools**`` line to the next blank line followed by a ``**Section**`` heading (or
the end of the message). Each entry starts at a ``<n>. Name: `` line; ``Description:`` and ``Parameters:`` lines
follow (their text may continue on further lines until the next entry).

Family heuristic (spec "Tool families"): name and description are lower-cased, camelCase / snake_case / dotted names
are split into words, and the keyword patterns below are counted. ``CALCULATE`` covers compute-like tools (math,
statistics, unit/format conversion, data transforms); ``SEARCH`` covers retrieval (search, lookup, fetch, list, get
information). The description's first word (its verb) counts twice. The family with more hits wins; no hit or a tie
gives ``OTHER`` (actions such as send/create/schedule). ``OTHER`` is treated as search-like unless ``other_as`` says
otherwise (:func:`effective_route`). A sidecar JSON ``{tool_name: "SEARCH"|"CALCULATE"|"OTHER"}``
(``router.tool_family_file``) overrides the heuristic tool by tool.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from verl.router import RouterAction, ToolFamily
from verl.utils.jsonl import load_json_file

logger = logging.getLogger(__name__)

TOOLS_HEADER = "**Available Tools**"
TOOL_FAMILIES_KEY = "tool_families"  # extra_info field written by verl.router.preprocess

# Keyword patterns (regular expressions matched as whole words on the normalised text).
CALCULATE_PATTERNS: tuple[str, ...] = (
    r"calculat\w*",
    r"comput\w*",
    r"convert\w*",
    r"conversions?",
    r"math\w*",
    r"arithmetic",
    r"sum",
    r"sums",
    r"multipl\w*",
    r"divid\w*",
    r"divisi\w*",
    r"factorial\w*",
    r"fibonacci",
    r"primes?",
    r"gcd",
    r"lcm",
    r"common (?:multiple|divisor)",
    r"average",
    r"median",
    r"mode",
    r"standard deviation",
    r"variance",
    r"statistical",
    r"probabilit\w*",
    r"integral\w*",
    r"derivative\w*",
    r"equations?",
    r"solve\w*",
    r"matri(?:x|ces)",
    r"vectors?",
    r"formula",
    r"interest",
    r"cagr",
    r"bmi",
    r"percentage",
    r"ratio",
    r"integers?",
    r"decimal",
    r"binary",
    r"hex",
    r"roots?",
    r"squares?",
    r"power of",
    r"logarithm\w*",
    r"geometr\w*",
    r"area",
    r"volume",
    r"perimeter",
    r"circle",
    r"triangle",
    r"polygon",
    r"angle",
    r"sort\w*",
    r"revers\w*",
    r"merg\w*",
    r"palindrome\w*",
    r"anagram\w*",
    r"permutation\w*",
    r"combination\w*",
    r"estimat\w*",
    r"simulat\w*",
    r"analy[sz]\w*",
    r"evaluat\w*",
    r"validat\w*",
    r"encod\w*",
    r"decod\w*",
    r"hash\w*",
    r"count(?:s|ing|er)?",
    r"duplicate",
    r"(?<!phone )numbers?",
    r"digits?",
    r"predict\w*",
    r"regression",
    r"leap year",
    r"checks? (?:if|whether)",
    r"longest",
    r"shortest",
    r"maximum",
    r"minimum",
    r"parenthes\w*",
    r"substrings?",
)
SEARCH_PATTERNS: tuple[str, ...] = (
    r"search\w*",
    r"retriev\w*",
    r"fetch\w*",
    r"get",
    r"gets",
    r"lookup",
    r"look up",
    r"query\w*",
    r"queries",
    r"list",
    r"lists",
    r"info",
    r"information",
    r"details?",
    r"news",
    r"data",
    r"feed",
    r"recommend\w*",
    r"suggest\w*",
    r"autocomplete",
    r"auto complete",
    r"browse",
    r"discover\w*",
    r"locat\w*",
    r"latest",
    r"current",
    r"historical",
    r"weather",
    r"price",
    r"prices",
    r"quotes?",
    r"rank\w*",
    r"standings",
    r"results?",
    r"profiles?",
    r"api",
)
_CALC_RE = re.compile(r"\b(?:" + "|".join(CALCULATE_PATTERNS) + r")\b")
_SEARCH_RE = re.compile(r"\b(?:" + "|".join(SEARCH_PATTERNS) + r")\b")

_ENTRY_RE = re.compile(r"^(\d+)\. Name: ?(.*)$")
_BLOCK_END_RE = re.compile(r"\n\s*\n(?=\*\*)")


@dataclass(frozen=True)
class ToolEntry:
    """One tool of an ``**Available Tools**`` block.

    ``text`` holds the entry's lines without the ``<n>. `` number prefix (so an entry can be renumbered).
    """

    number: int
    name: str
    description: str
    parameters: str
    text: str


@dataclass(frozen=True)
class ToolsBlock:
    """A parsed ``**Available Tools**`` block of a system message.

    ``start``/``end``: character span of the whole block in the message (``message[start:end]``, from the header to
    the end of the last entry); ``intro``: the lines between the header and the first entry.
    """

    start: int
    end: int
    intro: str
    tools: tuple[ToolEntry, ...]

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]


def parse_tools_block(system_text: str) -> Optional[ToolsBlock]:
    """Find and parse the ``**Available Tools**`` block of a system message (format in the module docstring).

    Returns:
        the :class:`ToolsBlock`, or None when the message has no such header. A header without entries gives an
        empty ``tools`` tuple; lines before the first entry are kept in ``intro``.
    """
    start = system_text.find(TOOLS_HEADER)
    if start < 0:
        return None
    body_start = start + len(TOOLS_HEADER)
    m = _BLOCK_END_RE.search(system_text, body_start)
    end = m.start() if m else len(system_text.rstrip())
    lines = system_text[body_start:end].split("\n")[1:]  # drop the rest of the header line
    intro: list[str] = []
    entries: list[tuple[int, list[str]]] = []
    for line in lines:
        em = _ENTRY_RE.match(line)
        if em:
            entries.append((int(em.group(1)), ["Name: " + em.group(2)]))
        elif entries:
            entries[-1][1].append(line)
        else:
            intro.append(line)
    tools = tuple(_make_entry(number, body) for number, body in entries)
    return ToolsBlock(start=start, end=end, intro="\n".join(intro), tools=tools)


def _make_entry(number: int, body: list[str]) -> ToolEntry:
    fields = {"Name": [], "Description": [], "Parameters": []}
    current = "Name"
    for line in body:
        head = line.split(":", 1)[0]
        if head in fields and ":" in line:
            current = head
            fields[head].append(line.split(":", 1)[1].strip())
        else:
            fields[current].append(line)
    join = lambda key: "\n".join(fields[key]).strip()  # noqa: E731
    return ToolEntry(number, join("Name"), join("Description"), join("Parameters"), "\n".join(body))


def _normalise(text: str) -> str:
    """Lower-case words: camelCase, snake_case, dotted/slashed names and punctuation split into spaces."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text)
    return " ".join(re.sub(r"[^A-Za-z0-9]+", " ", text).lower().split())


def classify_tool(name: str, description: str = "") -> ToolFamily:
    """Heuristic family of one tool from its name and description (rules in the module docstring).

    Returns ``ToolFamily.SEARCH``, ``CALCULATE`` or ``OTHER`` (no keyword, or as many search as calculate hits).
    """
    words = f"{_normalise(name)} {_normalise(description)}"
    calc = len(_CALC_RE.findall(words))
    search = len(_SEARCH_RE.findall(words))
    verb = _normalise(description).split(" ", 1)[0] if description.strip() else ""
    if verb and _CALC_RE.fullmatch(verb):
        calc += 1
    elif verb and _SEARCH_RE.fullmatch(verb):
        search += 1
    if calc > search:
        return ToolFamily.CALCULATE
    if search > calc:
        return ToolFamily.SEARCH
    return ToolFamily.OTHER


def parse_family(value: Any, where: str) -> ToolFamily:
    """``"SEARCH"`` / ``"CALCULATE"`` / ``"OTHER"`` (any case) -> :class:`ToolFamily`.

    Raises:
        ValueError: any other value; the message starts with ``where`` (file and tool).
    """
    if isinstance(value, ToolFamily):
        return value
    if isinstance(value, str) and value.strip().upper() in ToolFamily.__members__:
        return ToolFamily[value.strip().upper()]
    raise ValueError(f"{where}: family must be one of SEARCH, CALCULATE, OTHER, got {value!r}")


def load_tool_family_file(path: str | os.PathLike) -> dict[str, ToolFamily]:
    """Read the sidecar ``router.tool_family_file``: a JSON object ``{tool_name: "SEARCH"|"CALCULATE"|"OTHER"}``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: not UTF-8, invalid JSON (``JsonInputError``: file, line, column), not an object, or a bad family
            (the message names the file and the tool).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"router.tool_family_file {path} not found")
    raw = load_json_file(path)  # JsonInputError (a ValueError) names the file, line and column
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object {{tool_name: family}}, got {type(raw).__name__}")
    return {str(name): parse_family(value, f"{path}: tool {name!r}") for name, value in raw.items()}


def block_families(
    block: Optional[ToolsBlock], overrides: Optional[Mapping[str, ToolFamily]] = None
) -> dict[str, ToolFamily]:
    """``{tool_name: family}`` for the tools of a block, in block order: ``overrides`` first, else the heuristic.

    A name listed twice keeps its first entry's family.
    """
    out: dict[str, ToolFamily] = {}
    for tool in block.tools if block is not None else ():
        if tool.name in out:
            continue
        if overrides is not None and tool.name in overrides:
            out[tool.name] = overrides[tool.name]
        else:
            out[tool.name] = classify_tool(tool.name, tool.description)
    return out


def system_text_of(messages: Sequence[Mapping]) -> str:
    """Content of the first ``system`` message ('' when there is none)."""
    for m in messages:
        if m.get("role") == "system":
            return str(m.get("content", ""))
    return ""


def row_tool_families(
    messages: Sequence[Mapping], extra_info: Any = None, overrides: Optional[Mapping[str, ToolFamily]] = None
) -> dict[str, ToolFamily]:
    """Tool families of one row: ``overrides`` (sidecar) > ``extra_info["tool_families"]`` (from
    :mod:`verl.router.preprocess`, JSON string or dict) > the heuristic on the system message's tools block.

    Raises:
        ValueError: ``extra_info["tool_families"]`` is not valid JSON / holds a bad family (the tool is named).
    """
    stored: dict[str, ToolFamily] = {}
    raw = extra_info.get(TOOL_FAMILIES_KEY) if isinstance(extra_info, Mapping) else None
    if raw is not None:
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"extra_info.{TOOL_FAMILIES_KEY}: not valid JSON ({exc})") from exc
        if not isinstance(raw, Mapping):
            raise ValueError(f"extra_info.{TOOL_FAMILIES_KEY}: expected an object, got {type(raw).__name__}")
        stored = {str(k): parse_family(v, f"extra_info.{TOOL_FAMILIES_KEY}: tool {k!r}") for k, v in raw.items()}
    families = dict(stored) if stored else block_families(parse_tools_block(system_text_of(messages)))
    if overrides:
        families.update({name: overrides[name] for name in families if name in overrides})
    return families


def effective_route(
    family: ToolFamily, other_as: Optional[RouterAction] = RouterAction.SEARCH
) -> Optional[RouterAction]:
    """The route a tool family belongs to: SEARCH -> SEARCH, CALCULATE -> CALCULATE, OTHER -> ``other_as`` (None:
    neither)."""
    if family == ToolFamily.SEARCH:
        return RouterAction.SEARCH
    if family == ToolFamily.CALCULATE:
        return RouterAction.CALCULATE
    return other_as


def call_route(
    name: str, families: Mapping[str, ToolFamily], other_as: Optional[RouterAction] = RouterAction.SEARCH
) -> Optional[RouterAction]:
    """Route of a called tool: its family in ``families``; a name not listed there (hallucinated tool) is classified
    from the name alone with :func:`classify_tool`."""
    family = families.get(name)
    if family is None:
        family = classify_tool(name)
    return effective_route(family, other_as)


def offered_tools(
    action: RouterAction | int, families: Mapping[str, str], other_as: Optional[RouterAction] = RouterAction.SEARCH
) -> list[str]:
    """The executable tools a route offers: ANSWER none, SEARCH the ``search``-family tools, CALCULATE the
    ``calculate``-family ones, and ``other``-family tools on the route ``other_as`` names (none when None).

    Args:
        action: the route.
        families: tool name -> family (``search`` / ``calculate`` / ``other``, any case: an executable tool
            registry's ``families()``), in the registry's order.

    Returns:
        The offered names, in ``families``' order.

    Raises:
        ValueError: a family outside the three.
    """
    action = RouterAction(int(action))
    if action == RouterAction.ANSWER:
        return []
    out = []
    for name, family in families.items():
        try:
            route = effective_route(ToolFamily(str(family).upper()), other_as)
        except ValueError:
            raise ValueError(f"tool {name!r}: family {family!r} is not search, calculate or other") from None
        if route == action:
            out.append(name)
    return out
