"""Supervised fine-tuning dataset: chat prompt + target response, loss on the response only.

verl's ``SFTDataset`` (``verl/utils/dataset/sft_dataset.py`` upstream) with the changes this project needs:

- The prompt column may hold a chat (a list of ``{role, content}`` messages, as in ToolRL's RLLA parquet rows) or a
  plain string (wrapped as one user message, upstream's behaviour). It is rendered with the tokenizer's chat template
  and ``add_generation_prompt=True``, exactly as the RL rollout sees it.
- ``response_key`` is a dotted path into nested columns (default ``reward_model.ground_truth``), replacing upstream's
  ``response_dict_keys``.
- Items are **not padded**: each is a 1-D sequence of its own length, and :func:`sft_collate_fn` pads a micro batch
  to its longest member. Padding is on the **left** so that every response ends at the last position; the trainer
  then asks the model for the logits of the last ``max(response length)`` positions only (``logits_to_keep``),
  which skips the vocabulary projection of the long prompts (the dominant cost of a small model with a 49k vocab).
- ``loss_mask`` is aligned with ``input_ids``: 1 exactly on the response tokens and the appended EOS, 0 on the prompt.
  (Upstream shifts it by one to align with the next-token predictions; here the trainer shifts.)
- Truncation (``truncation``): ``left`` (default) drops tokens from the *start of the prompt* so that prompt +
  response fit ``max_length``; ``right`` keeps the first ``max_length`` tokens (may cut the response and its EOS);
  ``error`` raises a ``ValueError`` naming the file and row. A response that alone does not fit (with at least one
  prompt token) under ``left`` is cut on the right and counted in a warning.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("left", "right", "error")

DEFAULTS = dict(prompt_key="prompt", response_key="reward_model.ground_truth", max_length=1024, truncation="left",
                max_samples=-1)


def _cfg_get(config: Any, key: str) -> Any:
    """``config[key]`` for a dict, OmegaConf node or attribute object, falling back to :data:`DEFAULTS`."""
    if config is None:
        return DEFAULTS[key]
    value = config.get(key, None) if hasattr(config, "get") else getattr(config, key, None)
    return DEFAULTS[key] if value is None else value


def get_nested(row: Mapping, path: str, where: str) -> Any:
    """Follow a dotted ``path`` (``reward_model.ground_truth``) through nested mappings of one row.

    Raises:
        KeyError: a component is missing or a non-mapping is indexed; the message names ``where`` and the key.
    """
    value: Any = row
    for i, part in enumerate(path.split(".")):
        if not isinstance(value, Mapping) or part not in value:
            done = ".".join(path.split(".")[:i]) or "<row>"
            keys = sorted(value.keys()) if isinstance(value, Mapping) else type(value).__name__
            raise KeyError(f"{where}: key '{path}' not found (no '{part}' under {done}; has {keys})")
        value = value[part]
    return value


def _to_messages(prompt: Any, where: str) -> list[dict]:
    """Normalise a prompt cell into a list of ``{role, content}`` dicts (a string becomes one user message)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, (np.ndarray, Sequence)):
        messages = []
        for j, msg in enumerate(list(prompt)):
            if not isinstance(msg, Mapping) or "role" not in msg or "content" not in msg:
                raise ValueError(f"{where}: prompt message {j} is not a {{role, content}} mapping: {msg!r:.200}")
            messages.append({"role": str(msg["role"]), "content": str(msg["content"])})
        if messages:
            return messages
    raise ValueError(f"{where}: prompt must be a string or a non-empty list of messages, got {type(prompt).__name__}")


def truncate_pair(prompt_ids: list[int], response_ids: list[int], max_length: int, truncation: str,
                  where: str) -> tuple[list[int], list[int], bool]:
    """Fit ``prompt_ids + response_ids`` into ``max_length`` tokens.

    Returns:
        ``(prompt_ids, response_ids, response_cut)``; ``response_cut`` is True when response tokens were dropped.

    Raises:
        ValueError: ``truncation == 'error'`` and the pair is too long (message names ``where`` and the lengths), or
            an unknown mode.
    """
    total = len(prompt_ids) + len(response_ids)
    if total <= max_length:
        return prompt_ids, response_ids, False
    if truncation == "error":
        raise ValueError(f"{where}: {total} tokens (prompt {len(prompt_ids)} + response {len(response_ids)}) exceed "
                         f"max_length={max_length}; raise data.max_length or set data.truncation=left")
    if truncation == "right":
        keep_resp = max(max_length - len(prompt_ids), 0)
        return prompt_ids[:max_length], response_ids[:keep_resp], keep_resp < len(response_ids)
    if truncation == "left":
        keep_resp = min(len(response_ids), max_length - 1)
        keep_prompt = max_length - keep_resp
        return prompt_ids[len(prompt_ids) - keep_prompt:], response_ids[:keep_resp], keep_resp < len(response_ids)
    raise ValueError(f"unknown truncation mode {truncation!r}; expected one of {TRUNCATION_MODES}")


class SFTDataset(Dataset):
    """Tokenised (prompt, response) pairs from parquet files, for response-only cross-entropy.

    Args:
        parquet_files: one path or a list of paths; rows are concatenated in order.
        tokenizer: an HF tokenizer with a chat template and an ``eos_token_id`` (appended to every response).
        config: mapping/OmegaConf with ``prompt_key`` (default ``prompt``), ``response_key`` (dotted path, default
            ``reward_model.ground_truth``), ``max_length`` (1024), ``truncation`` (``left`` | ``right`` |
            ``error``), ``max_samples`` (-1: all rows). Missing keys take these defaults.

    Items (all 1-D ``torch.long`` tensors of the same length ``L <= max_length``, no padding):
        ``input_ids``, ``attention_mask`` (all ones), ``position_ids`` (``0..L-1``), ``loss_mask`` (1 on response
        tokens + EOS, 0 on prompt tokens).

    Raises:
        FileNotFoundError: a parquet file is missing.
        KeyError / ValueError: a row lacks the prompt/response key, has a malformed prompt or a non-string response,
            or is too long under ``truncation='error'``; messages name the file and row.
    """

    def __init__(self, parquet_files: str | Sequence[str], tokenizer, config: Any = None):
        files = [parquet_files] if isinstance(parquet_files, str) else [str(f) for f in parquet_files]
        if not files:
            raise ValueError("SFTDataset: no parquet files given")
        self.parquet_files = files
        self.tokenizer = tokenizer
        self.prompt_key = str(_cfg_get(config, "prompt_key"))
        self.response_key = str(_cfg_get(config, "response_key"))
        self.max_length = int(_cfg_get(config, "max_length"))
        self.truncation = str(_cfg_get(config, "truncation"))
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(f"data.truncation={self.truncation!r}; expected one of {TRUNCATION_MODES}")
        if self.max_length < 2:
            raise ValueError(f"data.max_length={self.max_length} must be at least 2")
        if tokenizer.eos_token_id is None:
            raise ValueError("SFTDataset: the tokenizer has no eos_token_id to end responses with")
        max_samples = int(_cfg_get(config, "max_samples"))

        prompts, responses, sources = self._read(files)
        if max_samples >= 0:
            prompts, responses, sources = prompts[:max_samples], responses[:max_samples], sources[:max_samples]
        self.sources = sources
        self._items = self._tokenize(prompts, responses, sources)
        self.lengths = np.array([len(ids) for ids, _ in self._items], dtype=np.int64)
        self.response_lengths = np.array([len(ids) - start for ids, start in self._items], dtype=np.int64)

    def _read(self, files: list[str]) -> tuple[list[list[dict]], list[str], list[str]]:
        prompts, responses, sources = [], [], []
        for path in files:
            try:
                frame = pd.read_parquet(path)
            except FileNotFoundError as exc:
                raise FileNotFoundError(f"SFT parquet file not found: {path}") from exc
            for i, row in enumerate(frame.to_dict(orient="records")):
                where = f"{path} row {i}"
                prompt = get_nested(row, self.prompt_key, where)
                response = get_nested(row, self.response_key, where)
                if not isinstance(response, str):
                    raise ValueError(f"{where}: response '{self.response_key}' is {type(response).__name__}, "
                                     "expected a string")
                prompts.append(_to_messages(prompt, where))
                responses.append(response)
                sources.append(where)
        return prompts, responses, sources

    def _tokenize(self, prompts: list[list[dict]], responses: list[str],
                  sources: list[str]) -> list[tuple[list[int], int]]:
        tok = self.tokenizer
        texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
        prompt_ids = tok(texts, add_special_tokens=False)["input_ids"]
        response_ids = tok(responses, add_special_tokens=False)["input_ids"]
        items, cut = [], 0
        for p_ids, r_ids, where in zip(prompt_ids, response_ids, sources):
            p_ids, r_ids, was_cut = truncate_pair(list(p_ids), list(r_ids) + [tok.eos_token_id], self.max_length,
                                                  self.truncation, where)
            cut += was_cut
            items.append((p_ids + r_ids, len(p_ids)))
        if cut:
            logger.warning("SFTDataset: %d of %d responses were cut to fit max_length=%d (they lose their EOS)",
                           cut, len(items), self.max_length)
        return items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        ids, start = self._items[item]
        length = len(ids)
        loss_mask = torch.zeros(length, dtype=torch.long)
        loss_mask[start:] = 1
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "attention_mask": torch.ones(length, dtype=torch.long),
            "position_ids": torch.arange(length, dtype=torch.long),
            "loss_mask": loss_mask,
        }


def sft_collate_fn(items: Sequence[Mapping[str, torch.Tensor]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Left-pad a list of :class:`SFTDataset` items to the longest one.

    Returns:
        dict of ``(B, L_max)`` long tensors: ``input_ids`` (pad = ``pad_token_id``), ``attention_mask`` and
        ``loss_mask`` (0 on padding), ``position_ids`` (0 on padding, ``0..L-1`` on each sequence).
    """
    if not items:
        raise ValueError("sft_collate_fn: empty batch")
    width = max(int(it["input_ids"].shape[0]) for it in items)
    out = {}
    for key in ("input_ids", "attention_mask", "position_ids", "loss_mask"):
        fill = pad_token_id if key == "input_ids" else 0
        batch = torch.full((len(items), width), fill, dtype=torch.long)
        for i, it in enumerate(items):
            seq = it[key]
            batch[i, width - seq.shape[0]:] = seq
        out[key] = batch
    return out
