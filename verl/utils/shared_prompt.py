"""Shared-prompt packing: the prompt of a group of rollouts is computed once, its responses attend to it.

GRPO-style rollouts draw ``n`` responses per prompt, so a ``[B, P + R]`` actor batch repeats every prompt ``n`` times.
RLLA prompts are long (median ~720 tokens) and responses short (<= 128 on CPU), so most of a log-prob or update pass
recomputes the same prompt. This module lays a micro-batch out as one packed row in which each distinct prompt appears
once, followed by the responses of the rows that share it::

    [ prompt_g | response_g1 | response_g2 | ... | prompt_h | response_h1 | ... ]

with a 4-D attention mask in which

* a prompt token attends causally to the earlier tokens of its own prompt, and
* a response token attends to its whole prompt and causally to the earlier tokens of its own response (never to a
  sibling's response, never across groups),

and with every token keeping its position id from the padded batch. Each response token therefore sees exactly the
keys, values and positions it sees in the unshared computation, so its hidden states, logits, log-probs and gradients
are the unshared ones up to floating-point summation order (exact, not approximate). The logits that predict a
response's first token sit at the prompt's last position and are shared by the whole group; a gather hands the same
row of logits to every member, and autograd sums the members' gradients there, as the unshared path does.

The mask is dense ``[T, T]``, so this path needs an attention implementation that takes an arbitrary mask (``sdpa``
or ``eager``); FlashAttention's varlen kernels cannot express "attend to the prompt, skip the siblings".

Coordinates: ``S = P + R`` columns per padded row, response in the last ``R`` columns (verl's layout: left-padded
prompt, right-padded response).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

SUPPORTED_ATTENTION = ("sdpa", "eager")


@dataclass
class SharedPromptBatch:
    """One micro-batch laid out with each distinct prompt once.

    Attributes:
        input_ids: [1, T] int64, the packed tokens (T = sum over groups of prompt length + its responses' lengths).
        position_ids: [1, T] int64, every token's position id in the padded batch.
        attention_mask: [1, 1, T, T] bool, True where the query (row) may attend to the key (column).
        keep: [K] int64 ascending, packed positions whose logits are needed (each group's last prompt token, and every
            response token that is followed by a valid response token).
        target_index: [N] int64, for each valid response token in row-major ``[b, R]`` order, the index into the
            ``K`` kept logits that predicts it.
        in_response: [b, R] bool, the valid response tokens (N = in_response.sum()).
        groups: the row indices of each group, in order of first appearance.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    keep: torch.Tensor
    target_index: torch.Tensor
    in_response: torch.Tensor
    groups: list[list[int]]


def group_rows_by_prompt(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_length: int) -> list[list[int]]:
    """Rows whose valid prompt tokens are identical, grouped in order of first appearance.

    Args:
        input_ids, attention_mask: [B, S]; prompt_length: P, the number of prompt columns (``S - R``).

    Returns:
        A list of groups, each a list of row indices (ascending); every row is in exactly one group.
    """
    groups: dict[tuple, list[int]] = {}
    prompt_ids = input_ids[:, :prompt_length].cpu()
    prompt_mask = attention_mask[:, :prompt_length].bool().cpu()
    for row in range(input_ids.shape[0]):
        key = tuple(prompt_ids[row][prompt_mask[row]].tolist())
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def shared_token_counts(attention_mask: torch.Tensor, prompt_length: int, groups: list[list[int]]) -> list[int]:
    """Tokens each group occupies in the shared layout: its prompt once plus each member's valid response tokens."""
    valid = attention_mask.bool()
    prompt_tokens = valid[:, :prompt_length].sum(dim=-1).tolist()
    response_tokens = valid[:, prompt_length:].sum(dim=-1).tolist()
    return [prompt_tokens[g[0]] + sum(response_tokens[row] for row in g) for g in groups]


def build_shared_prompt_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                              response_length: int) -> SharedPromptBatch:
    """Lay out a padded micro-batch with each distinct prompt computed once (see the module docstring).

    Args:
        input_ids, attention_mask, position_ids: [b, P + R] (left-padded prompts, right-padded responses).
        response_length: R.

    Returns:
        A :class:`SharedPromptBatch` on the device of ``input_ids``.

    Raises:
        ValueError: a row has no valid prompt token, or its valid response tokens are not a prefix of the response
            columns (the layout could not reproduce the padded computation).
    """
    device = input_ids.device
    batch_size, seqlen = input_ids.shape
    prompt_length = seqlen - response_length
    valid = attention_mask.bool()
    response_valid = valid[:, prompt_length:]
    response_lengths = response_valid.sum(dim=-1)
    prefix = torch.arange(response_length, device=device).unsqueeze(0) < response_lengths.unsqueeze(1)
    if not torch.equal(prefix, response_valid):
        bad = int((prefix != response_valid).any(dim=-1).nonzero()[0])
        raise ValueError(f"shared-prompt packing: row {bad}'s response tokens are not contiguous from the first "
                         "response column (right padding expected); disable actor_rollout_ref.model.use_shared_prompt")
    no_prompt = valid[:, :prompt_length].sum(dim=-1) == 0
    if no_prompt.any():
        raise ValueError(f"shared-prompt packing: row {int(no_prompt.nonzero()[0])} has no valid prompt token")

    groups = group_rows_by_prompt(input_ids, attention_mask, prompt_length)
    flat_ids, flat_pos, segment, member = [], [], [], []
    # predictor[b, t]: packed position whose logits predict response token t of row b (its prompt's last token for
    # t = 0, its response token t - 1 otherwise)
    predictor = torch.empty((batch_size, response_length), dtype=torch.long, device=device)
    steps = torch.arange(response_length, device=device)
    cursor = 0
    for group_index, rows in enumerate(groups):
        head = rows[0]
        prompt_cols = valid[head, :prompt_length].nonzero().squeeze(-1)
        flat_ids.append(input_ids[head, prompt_cols])
        flat_pos.append(position_ids[head, prompt_cols])
        segment.append(torch.full((prompt_cols.numel(),), group_index, dtype=torch.long, device=device))
        member.append(torch.full((prompt_cols.numel(),), -1, dtype=torch.long, device=device))
        cursor += prompt_cols.numel()
        last_prompt_token = cursor - 1
        for row in rows:
            length = int(response_lengths[row])
            predictor[row] = cursor + steps - 1
            predictor[row, 0] = last_prompt_token
            flat_ids.append(input_ids[row, prompt_length:prompt_length + length])
            flat_pos.append(position_ids[row, prompt_length:prompt_length + length])
            segment.append(torch.full((length,), group_index, dtype=torch.long, device=device))
            member.append(torch.full((length,), row, dtype=torch.long, device=device))
            cursor += length
    packed_ids = torch.cat(flat_ids).unsqueeze(0)
    packed_pos = torch.cat(flat_pos).unsqueeze(0)
    segment = torch.cat(segment)
    member = torch.cat(member)

    index = torch.arange(segment.numel(), device=device)
    allowed = (segment.unsqueeze(1) == segment.unsqueeze(0)) & (index.unsqueeze(0) <= index.unsqueeze(1))
    allowed &= (member.unsqueeze(0) == -1) | (member.unsqueeze(0) == member.unsqueeze(1))

    keep, target_index = torch.unique(predictor[response_valid], sorted=True, return_inverse=True)
    return SharedPromptBatch(packed_ids, packed_pos, allowed.view(1, 1, *allowed.shape), keep, target_index,
                             response_valid, groups)


def attention_mask_for(model: torch.nn.Module, allowed: torch.Tensor, dtype: torch.dtype = torch.float32):
    """The 4-D mask in the form the model's attention implementation takes.

    ``sdpa`` takes the boolean mask (True = attend); ``eager`` adds the mask to the scores, so it gets 0 where allowed
    and the dtype's most negative value elsewhere.

    Raises:
        ValueError: the model's attention implementation cannot take an arbitrary mask (e.g. flash_attention_2).
    """
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None) or "sdpa"
    if implementation == "sdpa":
        return allowed
    if implementation == "eager":
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed,
                                                                                         torch.finfo(dtype).min)
    raise ValueError(f"actor_rollout_ref.model.use_shared_prompt needs attention that takes a custom mask "
                     f"({' or '.join(SUPPORTED_ATTENTION)}); the model uses {implementation!r}")


__all__ = ["SharedPromptBatch", "group_rows_by_prompt", "shared_token_counts", "build_shared_prompt_batch",
           "attention_mask_for"]
