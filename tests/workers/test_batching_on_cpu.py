"""seqlen_balancing (balanced partitions, token-budget micro-batches, order restoration) and packing helpers."""

from __future__ import annotations

import random

import pytest
import torch
from tensordict import TensorDict

from verl.utils.packing import pack_sequences, packed_positions_of, response_predictor_mask, unpack_sequences
from verl.utils.seqlen_balancing import (
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    karmarkar_karp,
    log_seqlen_unbalance,
    rearrange_micro_batches,
    split_micro_batches,
)
from verl.utils.torch_functional import compute_position_id_with_mask


@pytest.mark.parametrize("equal_size", [True, False])
def test_partitions_cover_every_index_once_and_balance(equal_size):
    rng = random.Random(0)
    lengths = [rng.randint(10, 500) for _ in range(48)]
    parts = get_seqlen_balanced_partitions(lengths, 6, equal_size=equal_size)
    assert sorted(i for p in parts for i in p) == list(range(48))
    if equal_size:
        assert {len(p) for p in parts} == {8}
    sums = [sum(lengths[i] for i in p) for p in parts]
    naive = log_seqlen_unbalance(lengths, parts, "x")
    assert max(sums) - min(sums) <= 0.05 * sum(lengths) / 6  # far better than a contiguous split
    assert naive["x/balanced_max"] == max(sums) and naive["x/minmax_diff"] > max(sums) - min(sums)


def test_karmarkar_karp_rejects_bad_arguments():
    with pytest.raises(ValueError, match="divisible"):
        karmarkar_karp([1, 2, 3], 2, equal_size=True)
    with pytest.raises(ValueError, match="non-empty"):
        get_seqlen_balanced_partitions([1, 2], 3, equal_size=False)


def _batch(lengths, seqlen=12):
    mask = torch.zeros(len(lengths), seqlen, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, seqlen - n :] = 1
    return TensorDict({"attention_mask": mask, "row": torch.arange(len(lengths))}, batch_size=[len(lengths)])


def test_token_budget_micro_batches_respect_the_budget_and_restore_order():
    lengths = [12, 3, 7, 9, 2, 5, 11, 4]
    batch = _batch(lengths)
    micro_batches, partitions = rearrange_micro_batches(batch, max_token_len=16)
    assert all(int(m["attention_mask"].sum()) <= 16 for m in micro_batches)
    assert len(micro_batches) >= -(-sum(lengths) // 16)
    order = [i for p in partitions for i in p]
    restored = torch.cat([m["row"] for m in micro_batches])[torch.tensor(get_reverse_idx(order))]
    assert torch.equal(restored, torch.arange(len(lengths)))
    # split_micro_batches returns the same permutation
    micro, restore = split_micro_batches(batch, None, True, 16)
    assert torch.equal(torch.cat([m["row"] for m in micro])[restore], torch.arange(len(lengths)))
    with pytest.raises(ValueError, match="max_token_len"):
        rearrange_micro_batches(batch, max_token_len=10)


def test_pack_unpack_round_trip_and_response_positions():
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0, 0]])
    ids = torch.arange(21).view(3, 7)
    pos = compute_position_id_with_mask(mask)
    packed = pack_sequences(ids, mask, pos)
    assert packed.input_ids.tolist() == [[2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 18]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3]]
    assert packed.cu_seqlens.tolist() == [0, 4, 11, 15] and packed.max_seqlen == 7
    restored = unpack_sequences(packed.input_ids[0], packed.flat_index, 3, 7)
    assert torch.equal(restored, ids * mask)
    # response = last 3 columns: predictors are columns 3..5 where the next token is valid too
    keep = response_predictor_mask(mask, 3)
    assert keep.tolist() == [[0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 0, 0, 0]]
    assert packed.input_ids[0, packed_positions_of(mask, keep)].tolist() == [3, 4, 10, 11, 12, 17]


def test_pack_rejects_position_ids_that_would_merge_sequences():
    mask = torch.ones(2, 3, dtype=torch.long)
    pos = torch.tensor([[0, 1, 2], [3, 4, 5]])  # row 1 continues row 0's positions: attention would leak
    with pytest.raises(ValueError, match="position_ids"):
        pack_sequences(torch.zeros(2, 3, dtype=torch.long), mask, pos)
