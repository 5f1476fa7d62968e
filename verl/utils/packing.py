"""Remove padding: pack the valid tokens of a padded micro-batch into one row, and put per-token results back.

verl's ``use_remove_padding`` runs the model on a ``[1, T]`` row holding only the ``T`` valid tokens of a ``[B, S]``
batch (flash-attn's ``unpad_input``/``pad_input``). Here the packing needs no flash-attn: each sequence keeps its own
position ids (restarting at 0), the model is called with ``attention_mask=None``, and transformers (>= 4.5x, checked
on 5.23) detects the packed format from the position ids (``masking_utils.find_packed_sequence_indices``: a new
sequence starts wherever the position does not increase by exactly 1). It then builds a block-diagonal causal mask for
sdpa/eager, and flash-attention kernels derive ``cu_seqlens`` from the same position ids, so attention never crosses a
sequence boundary. ``pack_sequences`` verifies that the position ids really delimit the sequences that way and raises
otherwise, so a silently wrong mask is impossible.

Coordinates: ``S = P + R`` (prompt length + response length) for an actor/critic batch; the "flat index" of a
token is ``b * S + s``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedBatch:
    """A padded batch with its padding removed.

    Attributes:
        input_ids: [1, T] int64, the valid tokens of every row, row after row.
        position_ids: [1, T] int64, each row's own position ids (restarting at 0 at every row in standard data).
        flat_index: [T] int64, ``b * S + s`` of every packed token in the padded batch.
        cu_seqlens: [B + 1] int32, cumulative sequence lengths (row b is ``[cu_seqlens[b], cu_seqlens[b+1])``).
        max_seqlen: the longest row's number of valid tokens.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    flat_index: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int


def pack_sequences(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> PackedBatch:
    """Remove the padding of ``input_ids`` [B, S] (``attention_mask`` [B, S], ones on valid tokens).

    Each row's valid tokens must be contiguous (left-padded prompt + right-padded response, verl's layout) and their
    position ids must increase by exactly 1 and differ from ``previous + 1`` at every row boundary, which holds
    whenever each row's positions start at 0 (``compute_position_id_with_mask``).

    Raises:
        ValueError: a row has no valid token, or the position ids would make transformers merge or split rows.
    """
    mask = attention_mask.bool()
    lengths = mask.sum(dim=-1)
    if (lengths == 0).any():
        raise ValueError("pack_sequences: a row has no valid token (attention_mask all zero)")
    flat_index = torch.nonzero(mask.flatten(), as_tuple=False).squeeze(-1)
    packed_ids = input_ids.flatten()[flat_index].unsqueeze(0)
    packed_pos = position_ids.flatten()[flat_index].unsqueeze(0)
    cu_seqlens = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=input_ids.device)
    cu_seqlens[1:] = torch.cumsum(lengths, dim=0)
    _check_sequence_boundaries(packed_pos[0], cu_seqlens)
    return PackedBatch(packed_ids, packed_pos, flat_index, cu_seqlens, int(lengths.max()))


def _check_sequence_boundaries(packed_pos: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
    """Raise unless "position does not step by +1" marks exactly the starts in ``cu_seqlens``."""
    steps = torch.diff(packed_pos, prepend=packed_pos[:1] - 1)
    detected_starts = steps != 1
    true_starts = torch.zeros_like(detected_starts)
    true_starts[cu_seqlens[:-1].long()] = True
    true_starts[0] = detected_starts[0] = True
    if not torch.equal(detected_starts, true_starts):
        raise ValueError(
            "remove-padding: position_ids must increase by 1 inside each sequence and restart at every sequence "
            "(standard left-padded data gives this); disable model.use_remove_padding for this data"
        )


def unpack_sequences(
    packed_values: torch.Tensor, flat_index: torch.Tensor, batch_size: int, seqlen: int
) -> torch.Tensor:
    """Scatter per-token values ``[T, ...]`` back to ``[batch_size, seqlen, ...]`` (zeros on padding)."""
    out = packed_values.new_zeros((batch_size * seqlen,) + tuple(packed_values.shape[1:]))
    out[flat_index] = packed_values
    return out.view((batch_size, seqlen) + tuple(packed_values.shape[1:]))


def response_predictor_mask(attention_mask: torch.Tensor, response_length: int) -> torch.Tensor:
    """[B, S] bool: positions whose logits predict a valid response token.

    Position ``s`` predicts token ``s + 1``; the response occupies the last ``response_length`` columns, so the
    predicting positions are ``S - R - 1 .. S - 2`` where both the position and its target are valid.
    """
    mask = attention_mask.bool()
    keep = torch.zeros_like(mask)
    seqlen = mask.shape[1]
    start = seqlen - response_length - 1
    if start < 0:
        raise ValueError(f"response_length={response_length} leaves no prompt token in a sequence of {seqlen}")
    keep[:, start : seqlen - 1] = mask[:, start : seqlen - 1] & mask[:, start + 1 :]
    return keep


def packed_positions_of(attention_mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Indices into the packed row (``[T]`` order of ``pack_sequences``) of the valid positions flagged by ``keep``.

    Args:
        attention_mask: [B, S]; keep: [B, S] bool, a subset of the valid positions.

    Returns:
        [K] int64 ascending, K = keep.sum().
    """
    flat_mask = attention_mask.bool().flatten()
    packed_rank = torch.cumsum(flat_mask.long(), dim=0) - 1
    return packed_rank[keep.flatten()]


__all__ = ["PackedBatch", "pack_sequences", "packed_positions_of", "response_predictor_mask", "unpack_sequences"]
