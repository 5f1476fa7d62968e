"""Constrained decoding: chosen rows of a ``generate`` call never produce a given text (e.g. ``"<tool"``, so that no
ToolRL ``<tool_call>`` block can start), however the tokenizer splits it.

A small automaton over the text's proper prefixes: the state of a row is the longest suffix of its generated text
that is a proper prefix of ``text`` (``""``, ``"<"``, ``"<t"``, ...). For every state the tokens whose own text, after
that suffix, would contain ``text`` are banned (score ``-inf``); they are found once per tokenizer from each token's
decoded text, so a step costs one short decode per constrained row. ``generate`` runs custom processors after its
top-k / top-p warpers, so the ban needs untruncated sampling (the router refuses it otherwise at load): a truncated
distribution could hold only banned tokens. Tokens are decoded one by one, as byte-level BPE
tokenizers (SmolLM2's, Qwen's, Llama-3's) join them: the concatenation of the pieces is the text.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import torch

__all__ = ["FORBID_TOOL_CALLS", "TOOL_CALL_TEXT", "ForbidText", "banned_tokens_by_state"]

# an optional [B] bool field of a rollout's prompt batch: those rows never generate TOOL_CALL_TEXT, the start of a
# ToolRL ``<tool_call>`` block (the HF rollout applies :class:`ForbidText`; the router's ANSWER route sets it)
FORBID_TOOL_CALLS = "forbid_tool_calls"
TOOL_CALL_TEXT = "<tool"


@lru_cache(maxsize=8)
def _token_texts(tokenizer) -> tuple[str, ...]:
    return tuple(tokenizer.decode([i]) for i in range(len(tokenizer)))


def banned_tokens_by_state(token_texts: Sequence[str], text: str) -> list[torch.Tensor]:
    """For each proper prefix ``text[:k]`` (k = 0 .. len(text) - 1), the int64 ids of the tokens whose text ``t``
    makes ``text[:k] + t`` contain ``text``.

    Raises:
        ValueError: an empty ``text``.
    """
    if not text:
        raise ValueError("ForbidText: the forbidden text must not be empty")
    return [
        torch.tensor([i for i, t in enumerate(token_texts) if text in text[:k] + t], dtype=torch.long)
        for k in range(len(text))
    ]


def _state(tail: str, text: str) -> int:
    """Length of the longest suffix of ``tail`` that is a proper prefix of ``text``."""
    for k in range(min(len(text) - 1, len(tail)), 0, -1):
        if tail.endswith(text[:k]):
            return k
    return 0


class ForbidText:
    """A ``generate`` logits processor: the rows where ``rows`` is True never generate ``text``.

    Args:
        tokenizer: the model's tokenizer (its tokens' texts define the automaton).
        text: the forbidden text (e.g. ``"<tool"``).
        rows: ``[b]`` bool, the constrained rows of the ``generate`` call (its expanded rows when ``generate``
            repeats each prompt).
        prompt_width: columns of ``input_ids`` before the first generated token (the prompt's padded width).

    Raises:
        ValueError: an empty ``text``.
    """

    def __init__(self, tokenizer, text: str, rows: torch.Tensor, prompt_width: int):
        self.tokenizer, self.text, self.prompt_width = tokenizer, text, int(prompt_width)
        self.rows = torch.nonzero(rows.bool().flatten()).flatten().tolist()
        self.banned = banned_tokens_by_state(_token_texts(tokenizer), text)
        # tokens decoded per step: the state needs the last len(text) - 1 characters; 4x the text's length leaves
        # room for tokens that decode to nothing
        self.window = 4 * len(text)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for row in self.rows:
            generated = input_ids[row, self.prompt_width :][-self.window :].tolist()
            tail = self.tokenizer.decode(generated) if generated else ""
            banned = self.banned[_state(tail, self.text)]
            scores[row, banned.to(scores.device)] = float("-inf")
        return scores
