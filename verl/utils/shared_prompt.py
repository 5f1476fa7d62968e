"""Shared-prompt layout: the prompt of a group of rollouts is computed once, its responses attend to it.

GRPO-style rollouts draw ``n`` responses per prompt, so a ``[B, P + R]`` actor batch repeats every prompt ``n`` times.
RLLA prompts are long (median ~720 tokens) and responses short (<= 128 on CPU), so most of a log-prob or update pass
recomputes the same prompt. This module lays a micro-batch out as one row per distinct prompt (a group), the prompt
once, followed by the responses of the rows that share it::

    row g: [ pad | prompt_g | response_g1 | response_g2 | ... | pad ]
    row h: [ pad ...  | prompt_h | response_h1 | ...            | pad ]

Prompts are left-padded so that every prompt ends at the same column ``P_max`` (the longest prompt of the micro-batch)
and the responses of every group start there; the logits needed by all rows then lie in one band of columns, which
is what ``logits_to_keep`` can select. The 4-D attention mask ``[G, 1, T, T]`` lets

* a prompt token attend causally to the earlier tokens of its own prompt, and
* a response token attend to its whole prompt and causally to the earlier tokens of its own response (never to a
  sibling's response; other groups are other rows),

and every token keeps its position id from the padded batch. Each response token therefore sees exactly the keys,
values and positions it sees in the unshared computation, so its hidden states, logits, log-probs and gradients are
the unshared ones up to floating-point summation order (exact, not approximate). The logits that predict a
response's first token sit at the prompt's last position and are shared by the whole group; a gather hands the same
row of logits to every member, and autograd sums the members' gradients there, as the unshared path does. Padding
positions attend only to themselves (a query with no visible key would give NaN) and nothing attends to them.

One row per group, rather than one packed row for the whole micro-batch: a dense mask makes attention cost grow with
the square of the row length, so packing 8 RLLA groups (~11k tokens) into one row cost ~8x the attention FLOPs and
memory of 8 rows of ~1.4k tokens (measured on the micro-batch-32 benchmark, ``benchmarks/bench_grpo_vs_trl.py``).

The layout's mask is given densely, so this path needs an attention implementation that takes an arbitrary mask:
``sdpa`` and ``eager`` take it as a 4-D tensor, ``flex_attention`` as a FlexAttention block mask built from it (whole
blocks of masked keys are skipped, and no ``[T, T]`` mask is read by the kernel); FlashAttention's varlen kernels
cannot express "attend to the prompt, skip the siblings".

Coordinates: ``S = P + R`` columns per padded row, response in the last ``R`` columns (verl's layout: left-padded
prompt, right-padded response).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SUPPORTED_ATTENTION = ("sdpa", "eager", "flex_attention")


@dataclass
class SharedPromptBatch:
    """One micro-batch laid out with each distinct prompt once, one row per group.

    Attributes:
        input_ids: [G, T] int64, the tokens (T = the longest prompt + the largest group's response tokens; padding
            holds the first row's first token and is never attended to).
        position_ids: [G, T] int64, every token's position id in the padded batch (0 on padding).
        attention_mask: [G, 1, T, T] bool, True where the query (row) may attend to the key (column).
        keep: [K] int64 ascending, the columns whose logits are needed in some row (each group's last prompt token,
            and every response token that is followed by a valid response token).
        target_index: [N] int64, for each valid response token in row-major ``[b, R]`` order, the index into the
            ``G * K`` kept logits (``logits.reshape(G * K, V)``) that predicts it.
        in_response: [b, R] bool, the valid response tokens (N = in_response.sum()).
        groups: the row indices of each group, in order of first appearance (group g is layout row g).
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


def build_shared_prompt_batch(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, response_length: int
) -> SharedPromptBatch:
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
        raise ValueError(
            f"shared-prompt packing: row {bad}'s response tokens are not contiguous from the first "
            "response column (right padding expected); disable actor_rollout_ref.model.use_shared_prompt"
        )
    prompt_valid = valid[:, :prompt_length]
    prompt_lengths = prompt_valid.sum(dim=-1)
    if (prompt_lengths == 0).any():
        raise ValueError(
            f"shared-prompt packing: row {int((prompt_lengths == 0).nonzero()[0])} has no valid prompt token"
        )

    groups = group_rows_by_prompt(input_ids, attention_mask, prompt_length)
    start = int(prompt_lengths.max())  # P_max: every prompt ends here, every group's responses start here
    totals = [int(response_lengths[rows].sum()) for rows in groups]
    width = start + max(totals)
    num_groups = len(groups)
    ids = torch.full((num_groups, width), int(input_ids[0, 0]), dtype=input_ids.dtype, device=device)
    pos = torch.zeros((num_groups, width), dtype=position_ids.dtype, device=device)
    # member[g, c]: the batch row a response token belongs to; -1 on the prompt, -2 on padding
    member = torch.full((num_groups, width), -2, dtype=torch.long, device=device)
    # predictor[b, t]: column of row-of-b whose logits predict response token t of batch row b (its prompt's last
    # token for t = 0, its response token t - 1 otherwise)
    predictor = torch.empty((batch_size, response_length), dtype=torch.long, device=device)
    layout_row = torch.empty(batch_size, dtype=torch.long, device=device)
    steps = torch.arange(response_length, device=device)
    for g, rows in enumerate(groups):
        head = rows[0]
        prompt_cols = prompt_valid[head].nonzero().squeeze(-1)
        first = start - prompt_cols.numel()
        ids[g, first:start] = input_ids[head, prompt_cols]
        pos[g, first:start] = position_ids[head, prompt_cols]
        member[g, first:start] = -1
        cursor = start
        for row in rows:
            length = int(response_lengths[row])
            ids[g, cursor : cursor + length] = input_ids[row, prompt_length : prompt_length + length]
            pos[g, cursor : cursor + length] = position_ids[row, prompt_length : prompt_length + length]
            member[g, cursor : cursor + length] = row
            predictor[row] = cursor + steps - 1
            predictor[row, 0] = start - 1
            layout_row[row] = g
            cursor += length

    column = torch.arange(width, device=device)
    causal = column.view(1, 1, width) <= column.view(1, width, 1)  # [1, query, key]
    query, key = member.unsqueeze(2), member.unsqueeze(1)  # [G, T, 1], [G, 1, T]
    allowed = causal & (key != -2) & (query != -2) & ((key == -1) | (key == query))
    allowed |= torch.eye(width, dtype=torch.bool, device=device) & (query == -2)  # padding sees itself only

    keep, column_index = torch.unique(predictor[response_valid], sorted=True, return_inverse=True)
    rows_of_tokens = layout_row.unsqueeze(1).expand(batch_size, response_length)[response_valid]
    target_index = rows_of_tokens * keep.numel() + column_index
    return SharedPromptBatch(ids, pos, allowed.unsqueeze(1), keep, target_index, response_valid, groups)


def attention_mask_for(model: torch.nn.Module, allowed: torch.Tensor, dtype: torch.dtype = torch.float32):
    """The 4-D mask in the form the model's attention implementation takes.

    ``sdpa`` on CUDA takes the boolean mask (True = attend). ``sdpa`` on CPU gets the same mask as an additive float
    mask of ``dtype`` (0 where allowed, -inf elsewhere), built once here: given a boolean mask, torch's CPU attention
    converts it to that float mask itself in every layer and keeps each layer's copy for the backward pass (measured:
    4 layers of 8 x 1,900 x 1,900 keys held ~0.34 GB more than one shared float mask). The two give the same scores.
    ``eager`` adds the mask to the scores, so it gets 0 where allowed and the dtype's most negative value elsewhere.
    ``flex_attention`` gets :func:`block_mask_from_dense` of it.

    Args:
        allowed: [G, 1, T, T] bool (``SharedPromptBatch.attention_mask``).
        dtype: the float dtype of the masks that are not boolean (the attention's compute dtype).

    Raises:
        ValueError: the model's attention implementation cannot take an arbitrary mask (e.g. flash_attention_2).
    """
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None) or "sdpa"
    if implementation == "flex_attention":
        return block_mask_from_dense(allowed)
    if implementation == "sdpa":
        if allowed.device.type != "cpu":
            return allowed
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))
    if implementation == "eager":
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )
    raise ValueError(
        f"actor_rollout_ref.model.use_shared_prompt needs attention that takes a custom mask "
        f"({' or '.join(SUPPORTED_ATTENTION)}); the model uses {implementation!r}"
    )


def block_mask_from_dense(allowed: torch.Tensor):
    """A FlexAttention ``BlockMask`` equal to a dense boolean mask.

    Args:
        allowed: [G, 1, T, T] bool, True where query row ``q`` of group ``g`` may attend to key ``k``.

    Returns:
        ``torch.nn.attention.flex_attention.BlockMask`` of batch ``G``, one mask for every head, ``T`` queries and
        ``T`` keys, whose ``mask_mod(g, h, q, k)`` is ``allowed[g, 0, q, k]``: blocks with no allowed entry are
        skipped by the kernel, full blocks are computed without reading the mask.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    dense = allowed[:, 0]

    def mask_mod(b, h, q_idx, kv_idx):
        return dense[b, q_idx, kv_idx]

    groups, _, length, _ = allowed.shape
    return create_block_mask(mask_mod, B=groups, H=None, Q_LEN=length, KV_LEN=length, device=allowed.device)


__all__ = [
    "SharedPromptBatch",
    "attention_mask_for",
    "block_mask_from_dense",
    "build_shared_prompt_batch",
    "group_rows_by_prompt",
    "shared_token_counts",
]
