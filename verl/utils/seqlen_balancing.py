"""Balancing work by sequence length: partitions of equal token load and token-budget micro-batches.

Two users:

- the trainer's ``_balance_batch`` splits a batch into ``world_size`` parts of (nearly) equal token count with
  ``get_seqlen_balanced_partitions(seqlens, k, equal_size=True)`` so no data-parallel rank waits on the others;
- the workers' dynamic batch size (``use_dynamic_bsz``) cuts a mini-batch into micro-batches that each hold at most
  ``max_token_len`` valid tokens with ``rearrange_micro_batches`` and put the results back in the original order with
  ``get_reverse_idx``.

Names and signatures follow verl's ``verl/utils/seqlen_balancing.py``. The partitioner is the largest differencing
method of Karmarkar & Karp (1982), "The differencing method of set partitioning", extended to k subsets as in
Korf (1998), "A complete anytime algorithm for number partitioning".
"""

from __future__ import annotations

import heapq
import itertools
import logging

import torch
import torch.distributed as dist

from verl.utils.shared_prompt import group_rows_by_prompt, shared_token_counts

logger = logging.getLogger(__name__)


def ceildiv(a: int, b: int) -> int:
    """Integer ceiling of ``a / b`` for positive ``b``."""
    return -(a // -b)


class _PartialPartition:
    """k subsets of items, kept as (sum, item indices) pairs; ``spread`` = largest sum − smallest sum."""

    def __init__(self, subsets: list[tuple[int, list[int]]]):
        self.subsets = sorted(subsets, key=lambda s: s[0], reverse=True)

    @property
    def spread(self) -> int:
        return self.subsets[0][0] - self.subsets[-1][0]

    def merge(self, other: "_PartialPartition") -> "_PartialPartition":
        """Pair this state's heaviest subset with ``other``'s lightest, and so on (the differencing step)."""
        paired = [
            (mine[0] + theirs[0], mine[1] + theirs[1]) for mine, theirs in zip(self.subsets, reversed(other.subsets))
        ]
        return _PartialPartition(paired)


def karmarkar_karp(seqlen_list: list[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Split item indices into ``k_partitions`` subsets with nearly equal sums of ``seqlen_list``.

    Args:
        seqlen_list: the weight (token count) of each item.
        k_partitions: number of subsets.
        equal_size: every subset gets exactly ``len(seqlen_list) / k_partitions`` items (requires divisibility).

    Returns:
        ``k_partitions`` lists of item indices (each sorted ascending), covering every index exactly once.

    Raises:
        ValueError: ``equal_size`` with a length not divisible by ``k_partitions``, or ``k_partitions < 1``.
    """
    n = len(seqlen_list)
    if k_partitions < 1:
        raise ValueError(f"k_partitions must be >= 1, got {k_partitions}")
    if equal_size and n % k_partitions != 0:
        raise ValueError(f"equal_size partitioning needs len(seqlen_list)={n} divisible by k_partitions={k_partitions}")
    order = sorted(range(n), key=lambda i: (seqlen_list[i], i))
    states: list[_PartialPartition] = []
    if equal_size:
        # k consecutive items (in length order) start out in k different subsets, so every merge keeps sizes equal
        for start in range(0, n, k_partitions):
            group = order[start : start + k_partitions]
            states.append(_PartialPartition([(seqlen_list[i], [i]) for i in group]))
    else:
        for i in order:
            states.append(_PartialPartition([(seqlen_list[i], [i])] + [(0, [])] * (k_partitions - 1)))
    counter = itertools.count()
    heap = [(-s.spread, next(counter), s) for s in states]
    heapq.heapify(heap)
    while len(heap) > 1:
        _, _, first = heapq.heappop(heap)
        _, _, second = heapq.heappop(heap)
        merged = first.merge(second)
        heapq.heappush(heap, (-merged.spread, next(counter), merged))
    final = heap[0][2] if heap else _PartialPartition([(0, [])] * k_partitions)
    return [sorted(items) for _, items in final.subsets]


def get_seqlen_balanced_partitions(seqlen_list: list[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Balanced partition of item indices into ``k_partitions`` non-empty subsets (verl's entry point).

    Returns:
        ``k_partitions`` sorted index lists, ordered by the smallest index they hold.

    Raises:
        ValueError: fewer items than partitions, or a subset came out empty.
    """
    if len(seqlen_list) < k_partitions:
        raise ValueError(f"cannot split {len(seqlen_list)} items into {k_partitions} non-empty partitions")
    partitions = karmarkar_karp(seqlen_list, k_partitions, equal_size)
    if any(len(p) == 0 for p in partitions):
        raise ValueError(f"balanced partitioning produced an empty subset: {partitions}")
    return sorted(partitions, key=lambda p: p[0])


def log_seqlen_unbalance(seqlen_list: list[int], partitions: list[list[int]], prefix: str) -> dict[str, float]:
    """Metrics comparing the token load of a naive contiguous split with the balanced ``partitions``.

    Keys: ``{prefix}/min``, ``/max``, ``/minmax_diff`` (contiguous split), ``/balanced_min``, ``/balanced_max``,
    ``/mean``.
    """
    k = len(partitions)
    size = ceildiv(len(seqlen_list), k)
    naive = [sum(seqlen_list[i * size : (i + 1) * size]) for i in range(k)]
    balanced = [sum(seqlen_list[i] for i in p) for p in partitions]
    return {
        f"{prefix}/min": float(min(naive)),
        f"{prefix}/max": float(max(naive)),
        f"{prefix}/minmax_diff": float(max(naive) - min(naive)),
        f"{prefix}/balanced_min": float(min(balanced)),
        f"{prefix}/balanced_max": float(max(balanced)),
        f"{prefix}/mean": float(sum(balanced) / k),
    }


def _num_micro_batches_within_budget(seqlens: list[int], max_token_len: int) -> int:
    """Smallest k (from the ceil(total / budget) lower bound) whose balanced partition keeps every part in budget."""
    k = max(1, ceildiv(sum(seqlens), max_token_len))
    while k < len(seqlens):
        parts = karmarkar_karp(seqlens, k, equal_size=False)
        if max(sum(seqlens[i] for i in p) for p in parts) <= max_token_len:
            break
        k += 1
    return min(k, len(seqlens))


def _balanced_item_partitions(
    seqlens: list[int],
    max_token_len: int,
    device,
    dp_group,
    same_micro_num_in_dp: bool,
    num_batches_divided_by: int | None,
    item: str,
) -> list[list[int]]:
    """Partition item indices (sequences, or prompt groups) into the fewest balanced parts within the token budget,
    with the part count agreed over ``dp_group`` (see ``rearrange_micro_batches``)."""
    longest = max(seqlens)
    if longest > max_token_len:
        raise ValueError(
            f"a {item} of {longest} tokens exceeds the dynamic-batch token budget max_token_len={max_token_len} "
            "(raise *_max_token_len_per_gpu to at least prompt_length + response_length)"
        )
    k = _num_micro_batches_within_budget(seqlens, max_token_len)
    if num_batches_divided_by:
        k = ceildiv(k, num_batches_divided_by) * num_batches_divided_by
    if same_micro_num_in_dp and dist.is_available() and dist.is_initialized():
        count = torch.tensor([k], dtype=torch.int64, device=device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX, group=dp_group)
        k = int(count.item())
    if k > len(seqlens):
        raise ValueError(
            f"this rank holds {len(seqlens)} {item}s but {k} micro-batches are required to match the other ranks; "
            "raise *_max_token_len_per_gpu"
        )
    return get_seqlen_balanced_partitions(seqlens, k, equal_size=False)


def rearrange_micro_batches(
    batch,
    max_token_len: int,
    dp_group=None,
    same_micro_num_in_dp: bool = True,
    num_batches_divided_by: int | None = None,
    shared_prompt_length: int | None = None,
):
    """Cut ``batch`` into micro-batches of at most ``max_token_len`` valid tokens each.

    Args:
        batch: a ``TensorDict`` (batch dim B) holding ``attention_mask`` [B, S] (int or bool; ones mark valid tokens).
        max_token_len: token budget per micro-batch; must be at least the longest sequence.
        dp_group: process group whose ranks must run the same number of micro-batches (FSDP forwards are
            collective); defaults to the world when ``torch.distributed`` is initialised.
        same_micro_num_in_dp: take the maximum micro-batch count over ``dp_group``.
        num_batches_divided_by: round the count up to a multiple of this (e.g. pipeline stages).
        shared_prompt_length: with shared-prompt packing (``verl/utils/shared_prompt.py``), the number of prompt
            columns P: rows with the same prompt are kept in one micro-batch and a group costs its prompt once plus
            its responses.

    Returns:
        ``(micro_batches, micro_bsz_idx)``: the list of ``TensorDict`` micro-batches and, for each, the list of
        original row indices it holds (use ``get_reverse_idx`` on their concatenation to restore the order).

    Raises:
        ValueError: a single sequence (or prompt group, when shared) is longer than ``max_token_len``.

    The count starts at ceil(total tokens / budget) and grows until the balanced partition fits; when ranks disagree
    the largest count is used (a larger count only lowers the per-part load in practice; the budget is then a target,
    as upstream's).
    """
    mask = batch["attention_mask"]
    if shared_prompt_length is None:
        seqlens = mask.sum(dim=-1).tolist()
        partitions = _balanced_item_partitions(
            seqlens, max_token_len, mask.device, dp_group, same_micro_num_in_dp, num_batches_divided_by, "sequence"
        )
    else:
        groups = group_rows_by_prompt(batch["input_ids"], mask, shared_prompt_length)
        costs = shared_token_counts(mask, shared_prompt_length, groups)
        group_parts = _balanced_item_partitions(
            costs, max_token_len, mask.device, dp_group, same_micro_num_in_dp, num_batches_divided_by, "prompt group"
        )
        partitions = [sorted(row for g in part for row in groups[g]) for part in group_parts]
    micro_batches = [batch[torch.tensor(p, dtype=torch.long)] for p in partitions]
    return micro_batches, partitions


def get_reverse_idx(idx_map: list[int]) -> list[int]:
    """Inverse permutation: ``reverse[idx_map[i]] = i`` (so ``x[idx_map][reverse] == x``)."""
    reverse = [0] * len(idx_map)
    for position, original in enumerate(idx_map):
        reverse[original] = position
    return reverse


def split_micro_batches(
    batch,
    micro_batch_size: int | None,
    use_dynamic_bsz: bool,
    max_token_len: int | None,
    shared_prompt_length: int | None = None,
):
    """Micro-batches of a ``TensorDict`` for forward/backward: fixed size, or a token budget (dynamic batch size).

    Args:
        batch: ``TensorDict`` with batch dim B (``attention_mask`` [B, S] needed for the dynamic mode).
        micro_batch_size: rows per micro-batch (fixed mode; the last one may be smaller).
        use_dynamic_bsz: cut by ``max_token_len`` valid tokens with ``rearrange_micro_batches`` instead.
        max_token_len: the token budget (dynamic mode).
        shared_prompt_length: dynamic mode with shared-prompt packing: the number of prompt columns; rows sharing a
            prompt stay together and the budget counts the shared layout's tokens (fixed mode keeps the row order, so
            groups of consecutive rows stay whole when ``micro_batch_size`` is a multiple of the group size).

    Returns:
        ``(micro_batches, restore_idx)``: ``restore_idx`` is None in fixed mode (order kept), else the permutation
        that puts the concatenated per-micro-batch results back in the original row order
        (``torch.cat(results)[restore_idx]``).

    Raises:
        ValueError: the size or budget needed by the chosen mode is missing or < 1.
    """
    if use_dynamic_bsz:
        if not max_token_len or int(max_token_len) < 1:
            raise ValueError(f"dynamic batch size needs a positive max_token_len, got {max_token_len!r}")
        micro_batches, partitions = rearrange_micro_batches(
            batch, int(max_token_len), shared_prompt_length=shared_prompt_length
        )
        order = [i for part in partitions for i in part]
        return micro_batches, torch.tensor(get_reverse_idx(order), dtype=torch.long)
    if not micro_batch_size or int(micro_batch_size) < 1:
        raise ValueError(f"micro batch size must be a positive int, got {micro_batch_size!r}")
    return list(batch.split(int(micro_batch_size))), None


__all__ = [
    "ceildiv",
    "get_reverse_idx",
    "get_seqlen_balanced_partitions",
    "karmarkar_karp",
    "log_seqlen_unbalance",
    "rearrange_micro_batches",
    "split_micro_batches",
]
