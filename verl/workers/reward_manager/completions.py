"""Score token-id completions with a reward manager: what a server-side generation (the asynchronous mode's env
actors and validation) hands the same managers the synchronous trainer uses.

A completion is a prompt's token ids plus the generated ids. :func:`completion_rows` lays them out as the trainer's
rollout rows (prompt left-padded, response right-padded, ``attention_mask`` 1 on both), so a manager decodes, scores
and counts them exactly as it does a synchronous batch; :func:`score_completions` calls it and returns one score per
completion with its components and validity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence

import numpy as np
import torch

from verl.protocol import DataProto

__all__ = ["ScoredCompletions", "completion_rows", "score_completions"]


def completion_rows(
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    non_tensors: Mapping[str, Sequence[Any]],
    pad_token_id: int,
) -> DataProto:
    """The completions as rollout rows.

    Args:
        prompt_ids: ``B`` prompts (token ids). response_ids: ``B`` generated sequences (token ids, may be empty).
        non_tensors: per-row columns (``reward_model``, the data-source key, ``extra_info``), each of length ``B``.
        pad_token_id: the tokenizer's padding id.
    Returns: ``prompts`` int64 [B, P] (left-padded), ``responses`` int64 [B, R] (right-padded, R >= 1),
        ``attention_mask`` int64 [B, P + R]; the columns as object arrays.
    Raises ValueError: ``B`` is 0, or the lists and columns differ in length (the column named).
    """
    size = len(prompt_ids)
    if size == 0 or len(response_ids) != size:
        raise ValueError(f"completion_rows: {size} prompts and {len(response_ids)} responses (need as many, >= 1)")
    for key, column in non_tensors.items():
        if len(column) != size:
            raise ValueError(f"completion_rows: column {key!r} has {len(column)} entries for {size} completions")
    width_p = max(len(p) for p in prompt_ids)
    width_r = max(1, max(len(r) for r in response_ids))
    prompts = torch.full((size, width_p), int(pad_token_id), dtype=torch.long)
    responses = torch.full((size, width_r), int(pad_token_id), dtype=torch.long)
    attention = torch.zeros(size, width_p + width_r, dtype=torch.long)
    for i, (prompt, response) in enumerate(zip(prompt_ids, response_ids)):
        p, r = len(prompt), len(response)
        if p:
            prompts[i, width_p - p :] = torch.as_tensor(list(prompt), dtype=torch.long)
        if r:
            responses[i, :r] = torch.as_tensor(list(response), dtype=torch.long)
        attention[i, width_p - p : width_p + r] = 1
    columns = {}
    for key, column in non_tensors.items():
        array = np.empty(size, dtype=object)
        for i, value in enumerate(column):  # one object per row: dicts and message lists stay whole
            array[i] = value
        columns[key] = array
    return DataProto.from_dict(
        {"prompts": prompts, "responses": responses, "attention_mask": attention}, non_tensors=columns
    )


@dataclass
class ScoredCompletions:
    """What :func:`score_completions` returns, one entry per completion: ``scores`` (the reward, float), ``components``
    (``format`` / ``correctness`` / ``length`` and the scorer's other numeric keys, float), ``valid`` (False: the
    reward raised, the score is a placeholder 0), ``errors`` (``""`` when valid); ``metrics`` of the manager call
    (``reward/invalid_count``, the sandbox's and the tool-call metrics)."""

    scores: List[float]
    components: Dict[str, List[float]] = field(default_factory=dict)
    valid: List[bool] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    metrics: Dict[str, float] = field(default_factory=dict)


def score_completions(
    manager: Any,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    non_tensors: Mapping[str, Sequence[Any]],
    step: int,
    pad_token_id: int,
) -> ScoredCompletions:
    """Score completions with ``manager`` (an ``RLLARewardManager`` or a subclass: ``manager(data, step=,
    return_dict=True)``) at trainer step ``step`` (what ToolRL's scheduled rewards read as ``extra_info["step"]``).

    The score of a row is the sum of its ``reward_tensor`` (the manager puts it on one token). A sample whose reward
    raises is not fatal: it comes back ``valid`` False, as in the synchronous trainer.

    Raises: what :func:`completion_rows` raises; KeyError from the manager when a column it needs is missing.
    """
    data = completion_rows(prompt_ids, response_ids, non_tensors, pad_token_id)
    out = manager(data, step=int(step), return_dict=True)
    scores = out["reward_tensor"].sum(-1).tolist()
    extra = out.get("reward_extra_info", {})
    size = len(scores)
    valid = [bool(v) for v in extra.get("reward_valid", [True] * size)]
    errors = [str(e or "") for e in extra.get("reward_error", [""] * size)]
    components = {}
    for key, values in extra.items():
        if key in ("reward_valid", "reward_error") or len(values) != size:
            continue
        if all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in values if v is not None):
            components[key] = [float(v) if v is not None else 0.0 for v in values]
    return ScoredCompletions(scores, components, valid, errors, dict(out.get("reward_metrics", {})))
