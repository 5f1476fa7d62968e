"""Left-padded prompt batches: building them from token lists and concatenating batches of different prompt widths.

Rollout batches are ``[prompt | response]`` rows with the prompt left-padded to the batch's widest prompt (verl's
layout). Two batches generated separately (turns of a multi-turn rollout, or the generation batches of DAPO's dynamic
sampling) can have different prompt widths; :func:`concat_prompt_batches` left-pads the narrower ones first, which
never changes a row's tokens, mask or positions.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import torch

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask, pad_sequence_to_length

__all__ = ["concat_prompt_batches", "left_pad_prompts"]

# tensors whose columns are [prompt | response] (the prompt part is left-padded), and their padding values
_FULL_ROW_KEYS = (("input_ids", None), ("attention_mask", 0), ("position_ids", 0))


def left_pad_prompts(ids: Sequence[Sequence[int]], pad_token_id: int) -> Dict[str, torch.Tensor]:
    """``input_ids``/``attention_mask``/``position_ids`` int64 ``[B, P]`` (P = the longest row, at least 1) of
    left-padded token lists."""
    width = max(max(len(x) for x in ids), 1)
    input_ids = torch.full((len(ids), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        if len(row):
            input_ids[i, width - len(row) :] = torch.tensor(list(row), dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}


def concat_prompt_batches(batches: List[DataProto], pad_token_id: int) -> DataProto:
    """Concatenate rollout batches whose prompt widths differ.

    Args:
        batches: each with ``prompts`` ``[b_i, P_i]`` and ``input_ids`` / ``attention_mask`` / ``position_ids``
            ``[b_i, P_i + R]`` (the same response width R); other tensors must already agree in shape.
        pad_token_id: the id written into the new prompt padding.

    Returns:
        ``DataProto.concat`` of the batches after left-padding every prompt to ``max P_i`` (``input_ids`` with
        ``pad_token_id``, ``attention_mask`` and ``position_ids`` with 0).
    """
    width = max(b.batch["prompts"].shape[1] for b in batches)
    fixed = []
    for b in batches:
        missing = width - b.batch["prompts"].shape[1]
        if missing == 0:
            fixed.append(b)
            continue
        tensors = {k: b.batch[k] for k in b.batch.keys()}
        tensors["prompts"] = pad_sequence_to_length(tensors["prompts"], width, pad_token_id, left_pad=True)
        for key, value in _FULL_ROW_KEYS:
            if key in tensors:
                full = tensors[key]
                fill = pad_token_id if value is None else value
                tensors[key] = torch.cat([torch.full((full.shape[0], missing), fill, dtype=full.dtype), full], dim=1)
        fixed.append(DataProto.from_dict(tensors, non_tensors=dict(b.non_tensor_batch), meta_info=dict(b.meta_info)))
    return DataProto.concat(fixed)
