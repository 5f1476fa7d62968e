"""Route-conditioned prompt rewrite and re-tokenisation (spec "Prompt rewrite (before generation)").

Starting from a row's original ``prompt`` messages (system + user):

- ``ANSWER``: the ``**Available Tools**`` block is removed from the system message and :data:`ANSWER_INSTRUCTION`
  is appended (think, then respond, no ``<tool_call>``).
- ``SEARCH`` / ``CALCULATE``: the tools of that route's family (:func:`verl.router.families.effective_route`, so
  ``OTHER`` tools follow ``other_as``) are listed first and renumbered; ``filter_tools=True`` drops the others. A
  short instruction naming the preferred tools is appended. When no listed tool belongs to the family,
  ``filter_tools=True`` leaves no tools, so the block is removed and the ANSWER instruction is used; with
  ``filter_tools=False`` every tool is kept in its original order and the instruction says none is of that kind.

Instructions go at the end of the system message after a blank line (a ``**Routing Decision**`` section), so the
original text is otherwise unchanged. The rewrite is a pure function of its inputs: it never mutates them and the same
input always gives the same output. Re-tokenisation reuses the dataset's prompt text (``rl_dataset.prompt_text``)
and tokeniser/padding (``tokenize_and_postprocess_data``), so a rewritten prompt is encoded exactly like a dataset row.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from verl.router import RouterAction
from verl.router.families import TOOLS_HEADER, ToolsBlock, block_families, effective_route, parse_tools_block
from verl.utils.dataset.rl_dataset import PromptTooLongError, prompt_text
from verl.utils.torch_functional import compute_position_id_with_mask, tokenize_and_postprocess_data

logger = logging.getLogger(__name__)

ROUTING_HEADER = "**Routing Decision**"
ANSWER_INSTRUCTION = (
    f"{ROUTING_HEADER}\nNo tools are available for this turn. Do NOT use `<tool_call>`. Reason inside "
    "`<think> </think>`, then answer the user directly inside `<response> </response>`."
)
_FAMILY_TEXT = {
    RouterAction.SEARCH: ("looking up information", "search and retrieval tools", "pure calculation tools"),
    RouterAction.CALCULATE: ("computation", "calculation tools", "search and retrieval tools"),
}


def route_instruction(action: RouterAction, preferred: Sequence[str]) -> str:
    """The text appended to the system message for a tool route (``SEARCH`` / ``CALCULATE``).

    Args:
        action: ``RouterAction.SEARCH`` or ``RouterAction.CALCULATE``.
        preferred: names of the listed tools of that family, in listing order (may be empty).

    Raises:
        ValueError: ``action`` is ANSWER (use :data:`ANSWER_INSTRUCTION`).
    """
    if action not in _FAMILY_TEXT:
        raise ValueError(f"route_instruction: expected SEARCH or CALCULATE, got {action!r}")
    need, kind, avoid = _FAMILY_TEXT[RouterAction(action)]
    if not preferred:
        return (
            f"{ROUTING_HEADER}\nThis turn calls for {need}, but none of the listed tools is one of the {kind}; "
            "call a tool only if it is indispensable."
        )
    names = ", ".join(preferred)
    return (
        f"{ROUTING_HEADER}\nThis turn calls for {need}. Prefer the {kind} ({names}); avoid {avoid} unless "
        "they are indispensable."
    )


def _render_block(block: ToolsBlock, tools: Sequence) -> str:
    """A tools block with ``tools`` renumbered from 1 (header and intro lines as in the original)."""
    lines = [TOOLS_HEADER]
    if block.intro:
        lines.append(block.intro)
    lines.extend(f"{i}. {tool.text}" for i, tool in enumerate(tools, start=1))
    return "\n".join(lines)


def _remove_span(text: str, start: int, end: int) -> str:
    """``text`` without ``text[start:end]``, the blank-line separation around it collapsed to one."""
    before, after = text[:start].rstrip("\n"), text[end:].lstrip("\n")
    return f"{before}\n\n{after}" if before and after else before + after


def _append(text: str, instruction: str) -> str:
    text = text.rstrip()
    return f"{text}\n\n{instruction}" if text else instruction


def rewrite_system_text(
    system_text: str,
    action: RouterAction,
    families: Optional[Mapping] = None,
    filter_tools: bool = False,
    other_as: Optional[RouterAction] = RouterAction.SEARCH,
) -> str:
    """Rewrite one system message for ``action`` (rules in the module docstring).

    Args:
        system_text: the original system message (RLLA instruction).
        action: the route (``RouterAction`` or its int value).
        families: ``{tool_name: ToolFamily}`` (e.g. :func:`verl.router.families.row_tool_families`); tools missing
            from it are classified with the heuristic. None: heuristic for every tool.
        filter_tools: keep only the route's family (``router.filter_tools``).
        other_as: the route ``OTHER`` tools count for (None: neither).

    Returns:
        The rewritten system message.

    Raises:
        ValueError: ``action`` is not 0, 1 or 2.
    """
    try:
        action = RouterAction(int(action))
    except ValueError:
        raise ValueError(f"router action must be one of {[int(a) for a in RouterAction]}, got {action!r}") from None
    block = parse_tools_block(system_text)
    if action == RouterAction.ANSWER:
        if block is not None:
            system_text = _remove_span(system_text, block.start, block.end)
        return _append(system_text, ANSWER_INSTRUCTION)
    if block is None:
        return _append(system_text, route_instruction(action, []))
    fam = block_families(block, families)
    in_family = [effective_route(fam[t.name], other_as) == action for t in block.tools]
    preferred = [t for t, keep in zip(block.tools, in_family) if keep]
    if filter_tools and not preferred:
        return _append(_remove_span(system_text, block.start, block.end), ANSWER_INSTRUCTION)
    rest = [] if filter_tools else [t for t, keep in zip(block.tools, in_family) if not keep]
    new_block = _render_block(block, preferred + rest)
    system_text = system_text[: block.start] + new_block + system_text[block.end :]
    names = list(dict.fromkeys(t.name for t in preferred))
    return _append(system_text, route_instruction(action, names))


def rewrite_messages(
    messages: Sequence[Mapping[str, Any]],
    action: RouterAction,
    families: Optional[Mapping] = None,
    filter_tools: bool = False,
    other_as: Optional[RouterAction] = RouterAction.SEARCH,
) -> list[dict]:
    """Route-conditioned copy of a chat prompt: the first ``system`` message goes through
    :func:`rewrite_system_text`; every other message is copied unchanged. Without a system message, one holding only
    the route's instruction is prepended. The input is never mutated (new dicts are returned).

    Args: as :func:`rewrite_system_text`; ``messages`` is a list (or numpy object array) of ``{role, content}``.

    Returns:
        ``list[dict]`` of the same length (or one longer when a system message was added).
    """
    out = [dict(m) for m in messages]
    for m in out:
        if m.get("role") == "system":
            m["content"] = rewrite_system_text(str(m.get("content", "")), action, families, filter_tools, other_as)
            return out
    return [{"role": "system", "content": rewrite_system_text("", action, families, filter_tools, other_as)}] + out


def rewrite_batch(
    raw_prompts: Sequence[Sequence[Mapping]],
    actions: Sequence[int] | torch.Tensor,
    families: Optional[Sequence[Optional[Mapping]]] = None,
    filter_tools: bool = False,
    other_as: Optional[RouterAction] = RouterAction.SEARCH,
) -> list[list[dict]]:
    """:func:`rewrite_messages` for every row: ``raw_prompts[i]`` with ``actions[i]`` and ``families[i]``.

    Raises:
        ValueError: the lengths of ``raw_prompts``, ``actions`` and ``families`` differ.
    """
    actions = actions.tolist() if isinstance(actions, torch.Tensor) else list(actions)
    families = [None] * len(raw_prompts) if families is None else list(families)
    if not len(raw_prompts) == len(actions) == len(families):
        raise ValueError(
            f"rewrite_batch: {len(raw_prompts)} prompts, {len(actions)} actions, {len(families)} family maps"
        )
    return [rewrite_messages(p, a, f, filter_tools, other_as) for p, a, f in zip(raw_prompts, actions, families)]


def tokenize_prompts(
    tokenizer,
    prompts: Sequence[Sequence[Mapping]],
    max_prompt_length: int,
    truncation: str = "error",
    use_chat_template: bool = True,
    chat_template_func: Optional[Callable] = None,
    pad_token_id: Optional[int] = None,
) -> dict[str, torch.Tensor]:
    """Tokenise chat prompts exactly like ``RLHFDataset`` does: chat template with the generation prompt, no extra
    special tokens, left-padded (or truncated per ``truncation``: error/left/right/middle) to ``max_prompt_length``.

    Returns:
        ``{"input_ids", "attention_mask", "position_ids"}``, LongTensors ``[B, max_prompt_length]`` (position ids
        from ``compute_position_id_with_mask``).

    Raises:
        PromptTooLongError: ``truncation='error'`` and a prompt is longer (row, length and limit named).
        ValueError: empty batch or no pad/eos token.
    """
    if len(prompts) == 0:
        raise ValueError("tokenize_prompts: empty batch")
    if pad_token_id is None:
        pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad_token_id is None:
            raise ValueError("tokenize_prompts: the tokenizer has neither a pad nor an eos token")
    ids, masks = [], []
    for row, messages in enumerate(prompts):
        text = prompt_text(tokenizer, [dict(m) for m in messages], use_chat_template, chat_template_func)
        try:
            input_ids, attention_mask = tokenize_and_postprocess_data(
                text, tokenizer, max_prompt_length, pad_token_id, left_pad=True, truncation=truncation
            )
        except NotImplementedError:
            length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            raise PromptTooLongError(
                f"router-rewritten prompt, batch row {row}: {length} tokens exceed "
                f"max_prompt_length={max_prompt_length} (truncation='error')"
            ) from None
        ids.append(input_ids[0])
        masks.append(attention_mask[0])
    input_ids, attention_mask = torch.stack(ids), torch.stack(masks)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
    }
