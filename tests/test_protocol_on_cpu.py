"""Behaviour of ``verl.protocol.DataProto`` and its helpers (upstream verl semantics), CPU only."""

from __future__ import annotations

import pickle
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl.protocol import (
    DataProto,
    DataProtoConfig,
    DataProtoError,
    DataProtoFuture,
    DataProtoItem,
    collate_fn,
    deserialize_single_tensor,
    deserialize_tensordict,
    fold_batch_dim,
    pad_dataproto_to_divisor,
    serialize_single_tensor,
    serialize_tensordict,
    unfold_batch_dim,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)
import functools
import operator


def make_data(n: int = 6, meta: dict | None = None) -> DataProto:
    """Rows i: obs = [2i, 2i+1], labels = letter i, extra = [i, i] (equal-length lists)."""
    obs = torch.arange(2 * n).view(n, 2)
    labels = [chr(ord("a") + i) for i in range(n)]
    extra = [[i, i] for i in range(n)]
    return DataProto.from_dict(
        tensors={"obs": obs}, non_tensors={"labels": labels, "extra": extra}, meta_info=dict(meta or {"name": "x"})
    )


def rows(data: DataProto) -> list[int]:
    """Row ids (obs[:, 0] // 2), to check which rows a DataProto holds."""
    return (data.batch["obs"][:, 0] // 2).tolist()


# ------------------------------------------------------------------------------------------------- union helpers


def test_union_tensor_dict_shared_equal_ok_conflict_raises():
    obs = torch.randn(10, 3)
    td1 = TensorDict({"obs": obs, "act": torch.randn(10, 2)}, batch_size=[10])
    td2 = TensorDict({"obs": obs.clone(), "rew": torch.randn(10)}, batch_size=[10])
    out = union_tensor_dict(td1, td2)
    assert out is td1 and set(td1.keys()) == {"obs", "act", "rew"}
    bad = TensorDict({"obs": obs + 1}, batch_size=[10])
    with pytest.raises(ValueError, match="'obs'"):
        union_tensor_dict(td1, bad)
    with pytest.raises(AssertionError):  # upstream-compatible
        union_tensor_dict(td1, bad)
    with pytest.raises(DataProtoError, match="batch sizes"):
        union_tensor_dict(td1, TensorDict({"x": torch.zeros(3)}, batch_size=[3]))


def test_union_numpy_dict_deep_equality():
    arr3d = np.arange(24).reshape(2, 3, 4)
    union_numpy_dict({"a": arr3d}, {"a": arr3d.copy()})
    with pytest.raises(DataProtoError, match="'nd'"):
        union_numpy_dict({"nd": arr3d}, {"nd": arr3d + 1})

    obj = np.array([1, "hello", np.array([2, 3])], dtype=object)
    union_numpy_dict({"a": obj}, {"a": np.array([1, "hello", np.array([2, 3])], dtype=object)})
    with pytest.raises(DataProtoError):
        union_numpy_dict({"a": obj}, {"a": np.array([1, "hello", np.array([2, 4])], dtype=object)})

    # NaN equals NaN at the same position, float NaN mixed with the string "nan"
    mixed = np.array([float("nan")] * 3 + ["nan"], dtype=object)
    union_numpy_dict({"b": mixed}, {"b": mixed.copy()})
    nan = np.array([1.0, np.nan, 3.0])
    union_numpy_dict({"d": nan}, {"d": np.array([1.0, np.nan, 3.0])})
    for other in (np.array([1.0, 2.0, 3.0]), np.array([np.nan, 1.0, 3.0])):
        with pytest.raises(DataProtoError):
            union_numpy_dict({"d": nan}, {"d": other})

    # self-referencing object arrays compare without recursion errors
    c1 = np.array([None], dtype=object)
    c1[0] = c1
    c2 = np.array([None], dtype=object)
    c2[0] = c2
    union_numpy_dict({"c": c1}, {"c": c2})
    with pytest.raises(DataProtoError):
        union_numpy_dict({"c": c1}, {"c": np.array([None], dtype=object)})

    with pytest.raises(TypeError, match="'l'"):
        union_numpy_dict({}, {"l": [1, 2]})


def test_dataproto_union_in_place_and_conflicts():
    data = make_data(4, {"a": 1})
    other = DataProto.from_dict(
        tensors={"obs": data.batch["obs"].clone(), "rew": torch.ones(4)},
        non_tensors={"labels": list("abcd"), "uid": ["u0", "u1", "u2", "u3"]},
        meta_info={"a": 1, "b": 2},
    )
    out = data.union(other)
    assert out is data
    assert set(data.batch.keys()) == {"obs", "rew"}
    assert set(data.non_tensor_batch) == {"labels", "extra", "uid"}
    assert data.meta_info == {"a": 1, "b": 2}

    with pytest.raises(ValueError, match="'rew'"):
        data.union(DataProto.from_dict(tensors={"rew": torch.zeros(4)}))
    with pytest.raises(ValueError, match="'uid'"):
        data.union(DataProto.from_dict(non_tensors={"uid": ["x"] * 4}))
    with pytest.raises(ValueError, match="'a'"):
        data.union(DataProto(meta_info={"a": 2}))
    with pytest.raises(ValueError, match="lengths"):
        data.union(make_data(3))


# --------------------------------------------------------------------------------------------------- constructors


def test_from_dict_batch_dims_and_shapes():
    obs, act = torch.randn(10, 4), torch.randn(10, 4, 3)
    data = DataProto.from_dict(tensors={"obs": obs, "act": act})
    assert data.batch.batch_size == torch.Size([10]) and len(data) == 10
    for dims in (2, 3):  # a DataProto supports exactly one batch dimension, as upstream
        with pytest.raises(AssertionError):
            DataProto.from_dict(tensors={"obs": obs, "act": act}, num_batch_dims=dims)
    with pytest.raises(DataProtoError, match="'act'"):
        DataProto.from_dict(tensors={"obs": obs, "act": torch.randn(9, 4)})
    with pytest.raises(TypeError, match="'obs'"):
        DataProto.from_dict(tensors={"obs": [1, 2]})


def test_non_tensor_lists_stay_one_dimensional():
    data = make_data(3)
    extra = data.non_tensor_batch["extra"]
    assert extra.dtype == object and extra.shape == (3,)
    assert extra[1] == [1, 1]
    dicts = DataProto.from_dict(non_tensors={"rm": [{"gt": "a"}, {"gt": "b"}]})
    assert dicts.non_tensor_batch["rm"].shape == (2,) and dicts.non_tensor_batch["rm"][1] == {"gt": "b"}


def test_from_single_dict_splits_and_rejects_other_types():
    data = DataProto.from_single_dict(
        {"ids": torch.zeros(3, 2), "uid": np.array(["a", "b", "c"], dtype=object)}, meta_info={"m": 1}
    )
    assert list(data.batch.keys()) == ["ids"] and list(data.non_tensor_batch) == ["uid"]
    assert data.meta_info == {"m": 1}
    with pytest.raises(TypeError, match="'bad'"):
        DataProto.from_single_dict({"ids": torch.zeros(3, 2), "bad": ["a", "b", "c"]})

    class Sub(DataProto):
        pass

    assert type(Sub.from_single_dict({"x": torch.tensor([0])})) is Sub


def test_inconsistent_lengths_raise_naming_the_key():
    with pytest.raises(ValueError, match="'labels'.*length 2.*batch size 3"):
        DataProto.from_dict(tensors={"obs": torch.zeros(3)}, non_tensors={"labels": ["a", "b"]})
    with pytest.raises(ValueError, match="'b'"):
        DataProto(non_tensor_batch={"a": np.zeros(3), "b": np.zeros(2)})
    with pytest.raises(TypeError, match="'a'"):
        DataProto(non_tensor_batch={"a": ["x"]})
    with pytest.raises(TypeError, match="TensorDict"):
        DataProto(batch={"obs": torch.zeros(3)})


def test_len():
    labels = np.array(["a", "b", "c"], dtype=object)
    assert len(DataProto.from_dict({"obs": torch.zeros(3, 2)}, {"labels": labels})) == 3
    assert len(DataProto(batch=None, non_tensor_batch={"labels": labels})) == 3
    assert len(DataProto(batch=None, non_tensor_batch={}, meta_info={"i": 1})) == 0
    assert len(DataProto(batch=None, non_tensor_batch=None, meta_info=None)) == 0


# ------------------------------------------------------------------------------------------------------ indexing


def test_int_index_returns_item():
    data = make_data(4)
    item = data[2]
    assert isinstance(item, DataProtoItem)
    assert item.batch["obs"].tolist() == [4, 5]
    assert item.non_tensor_batch == {"labels": "c", "extra": [2, 2]}
    assert item.meta_info == {"name": "x"}
    assert data[-1].non_tensor_batch["labels"] == "d"
    assert data[np.int64(1)].non_tensor_batch["labels"] == "b"
    with pytest.raises(IndexError):
        data[4]
    with pytest.raises(TypeError):
        data["obs"]


def test_slice_returns_dataproto_view():
    data = make_data(6)
    part = data[1:5:2]
    assert isinstance(part, DataProto) and rows(part) == [1, 3]
    assert list(part.non_tensor_batch["labels"]) == ["b", "d"]
    assert part.meta_info == data.meta_info
    view = data.slice(0, 2)
    view.batch["obs"][0, 0] = 100  # basic slices share storage with the parent
    assert data.batch["obs"][0, 0] == 100


@pytest.mark.parametrize(
    "make_index",
    [
        lambda: [5, 0, 0, 3],
        lambda: np.array([5, 0, 0, 3]),
        lambda: torch.tensor([5, 0, 0, 3]),
        lambda: [False, True, False, True, True, False],
        lambda: np.array([False, True, False, True, True, False]),
        lambda: torch.tensor([False, True, False, True, True, False]),
    ],
)
def test_fancy_and_boolean_indexing(make_index):
    data = make_data(6)
    index = make_index()
    out = data[index]
    expected = np.arange(6)[np.asarray(index.numpy() if isinstance(index, torch.Tensor) else index)]
    assert isinstance(out, DataProto)
    assert rows(out) == expected.tolist()
    assert list(out.non_tensor_batch["labels"]) == [chr(ord("a") + i) for i in expected]
    assert out.non_tensor_batch["extra"].shape == (len(expected),)
    assert isinstance(out.batch.batch_size, torch.Size) and all(isinstance(d, int) for d in out.batch.batch_size)
    out.batch["obs"][0, 0] = -1  # fancy indexing copies
    assert data.batch["obs"].min() >= 0


def test_bad_indices_raise():
    data = make_data(4)
    with pytest.raises(IndexError, match="mask has length 3"):
        data[[True, False, True]]
    with pytest.raises(IndexError):
        data[[0, 9]]
    with pytest.raises(TypeError):
        data[np.array([0.5, 1.0])]
    assert len(data[[]]) == 0


def test_select_and_deepcopy_semantics():
    data = make_data(3, {"a": 1, "b": [1]})
    shallow = data.select(batch_keys=["obs"], non_tensor_batch_keys=["labels"], meta_info_keys=["b"])
    assert list(shallow.batch.keys()) == ["obs"] and list(shallow.non_tensor_batch) == ["labels"]
    assert shallow.meta_info == {"b": [1]}
    shallow.batch["obs"][0, 0] = 42
    assert data.batch["obs"][0, 0] == 42  # shares tensors
    deep = data.select(deepcopy=True)
    deep.batch["obs"][0, 0] = 7
    deep.non_tensor_batch["extra"][0].append(99)
    deep.meta_info["b"].append(2)
    assert data.batch["obs"][0, 0] == 42 and data.non_tensor_batch["extra"][0] == [0, 0] and data.meta_info["b"] == [1]
    with pytest.raises(KeyError, match="missing"):
        data.select(batch_keys=["missing"])


def test_pop():
    data = DataProto.from_dict(
        {"obs": torch.randn(5, 2), "act": torch.randn(5, 3)}, {"l": list("abcde")}, meta_info={"2": 2, "1": 1}
    )
    popped = data.pop(batch_keys=["obs"], non_tensor_batch_keys=["l"], meta_info_keys=["2"])
    assert set(popped.batch.keys()) == {"obs"} and set(popped.non_tensor_batch) == {"l"}
    assert popped.meta_info == {"2": 2}
    assert set(data.batch.keys()) == {"act"} and data.non_tensor_batch == {} and data.meta_info == {"1": 1}
    with pytest.raises(KeyError, match="obs"):
        data.pop(batch_keys=["obs", "act"])
    assert set(data.batch.keys()) == {"act"}  # nothing removed on error

    no_batch = DataProto.from_dict(non_tensors={"labels": ["a", "b"]})
    assert list(no_batch.pop(non_tensor_batch_keys=["labels"]).non_tensor_batch["labels"]) == ["a", "b"]
    assert no_batch.non_tensor_batch == {}


def test_rename():
    data = make_data(2)
    data.rename("obs", "observation")
    assert list(data.batch.keys()) == ["observation"]
    data = DataProto.from_dict({"a": torch.zeros(2), "b": torch.ones(2)})
    data.rename(["a", "b"], ["x", "y"])
    assert torch.equal(data.batch["y"], torch.ones(2))
    with pytest.raises(ValueError):
        data.rename(["x"], ["p", "q"])
    with pytest.raises(KeyError):
        data.rename("nope", "z")


# ------------------------------------------------------------------------------------------- reshaping / combining


def test_reorder_in_place():
    data = make_data(6, {"name": "abc"})
    data.reorder(torch.tensor([3, 4, 2, 0, 1, 5]))
    assert rows(data) == [3, 4, 2, 0, 1, 5]
    assert list(data.non_tensor_batch["labels"]) == list("decabf")
    assert data.meta_info == {"name": "abc"}
    with pytest.raises(ValueError):
        data.reorder(torch.tensor([0, 1]))


def test_chunk_concat_roundtrip_and_metrics_merge():
    data = make_data(6, {"name": "abc"})
    with pytest.raises(AssertionError, match="size 6.*5 chunks"):
        data.chunk(5)
    parts = data.chunk(2)
    assert [rows(p) for p in parts] == [[0, 1, 2], [3, 4, 5]]
    assert list(parts[1].non_tensor_batch["labels"]) == ["d", "e", "f"]
    assert all(p.meta_info == {"name": "abc"} for p in parts)

    back = DataProto.concat(parts)
    assert torch.equal(back.batch["obs"], data.batch["obs"])
    assert list(back.non_tensor_batch["labels"]) == list(data.non_tensor_batch["labels"])
    assert back.non_tensor_batch["extra"].shape == (6,)
    assert back.meta_info == {"name": "abc"}

    parts[0].meta_info["metrics"] = {"loss": 1.0, "acc": 0.5}
    parts[1].meta_info["metrics"] = [{"loss": 2.0}, {"loss": 3.0, "acc": 0.7}]
    merged = DataProto.concat(parts)
    assert merged.meta_info["metrics"] == {"loss": [1.0, 2.0, 3.0], "acc": [0.5, 0.7]}
    assert merged.meta_info["name"] == "abc"

    parts[1].meta_info["name"] = "other"
    with pytest.raises(ValueError, match="'name'"):
        DataProto.concat(parts)
    with pytest.raises(ValueError):
        DataProto.concat([])


def test_chunk_with_auto_padding_allows_uneven_sizes():
    data = DataProto.from_dict({"obs": torch.arange(5)}, auto_padding=True)
    assert data.is_padding_enabled()
    assert [len(p) for p in data.chunk(3)] == [2, 2, 1]
    plain = DataProto.from_dict({"obs": torch.arange(5)})
    with pytest.raises(DataProtoError):
        plain.chunk(3)
    DataProtoConfig.auto_padding = True
    try:
        assert [len(p) for p in plain.chunk(2)] == [3, 2]
    finally:
        DataProtoConfig.auto_padding = False
    assert not plain.is_padding_enabled()


def test_padding_method_repeats_last_or_first_row():
    data = make_data(3)
    data.padding(2)
    assert rows(data) == [0, 1, 2, 2, 2]
    data = make_data(3)
    data.padding(1, padding_candidate="first")
    assert rows(data) == [0, 1, 2, 0] and data.non_tensor_batch["labels"][-1] == "a"


def test_split():
    parts = make_data(5).split(2)
    assert [rows(p) for p in parts] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError):
        make_data(5).split(0)


@pytest.mark.parametrize("interleave,expected", [(True, [0, 0, 1, 1, 2, 2]), (False, [0, 1, 2, 0, 1, 2])])
def test_repeat(interleave, expected):
    data = make_data(3, {"info": "t"})
    out = data.repeat(repeat_times=2, interleave=interleave)
    assert rows(out) == expected
    assert list(out.non_tensor_batch["labels"]) == [chr(ord("a") + i) for i in expected]
    assert out.non_tensor_batch["extra"].shape == (6,)
    assert out.meta_info == {"info": "t"}


def test_sample_level_repeat():
    data = make_data(3, {"info": "t"})
    out = data.sample_level_repeat([3, 1, 2])
    assert rows(out) == [0, 0, 0, 1, 2, 2]
    assert list(out.non_tensor_batch["labels"]) == list("aaabcc")
    assert rows(data.sample_level_repeat(torch.tensor([1, 0, 3]))) == [0, 2, 2, 2]
    assert out.meta_info == {"info": "t"}
    with pytest.raises(ValueError):
        data.sample_level_repeat([1, 2])
    with pytest.raises(ValueError):
        data.sample_level_repeat([1, -1, 2])


def test_unfold_column_chunks():
    obs1 = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    obs2 = torch.tensor([[1, 2], [5, 6], [9, 10]])
    labels = np.empty((3, 2), dtype=object)
    labels[:] = [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]]
    data = DataProto.from_dict({"obs1": obs1, "obs2": obs2}, {"labels": labels, "l": list("abc")}, {"n": 1})
    out = data.unfold_column_chunks(2, split_keys=["obs1", "labels"])
    assert out.batch["obs1"].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]]
    assert out.batch["obs2"].tolist() == [[1, 2], [1, 2], [5, 6], [5, 6], [9, 10], [9, 10]]
    assert out.non_tensor_batch["labels"].tolist() == [["a1"], ["a2"], ["b1"], ["b2"], ["c1"], ["c2"]]
    assert list(out.non_tensor_batch["l"]) == list("aabbcc") and out.meta_info == {"n": 1}
    with pytest.raises(ValueError, match="'obs2'"):
        data.unfold_column_chunks(4, split_keys=["obs2"])


def test_unfold_column_chunks_splits_a_list_of_lists_as_upstream_does():
    """``from_dict`` keeps each row's list whole (a ``[B]`` object array); upstream stores ``[B, K]``. Splitting it
    cuts every row's list as upstream's reshape does, and rows of unequal length are refused."""
    obs = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    data = DataProto.from_dict({"obs": obs}, {"labels": [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]]})
    assert data.non_tensor_batch["labels"].shape == (3,)
    out = data.unfold_column_chunks(2, split_keys=["obs", "labels"])
    assert out.non_tensor_batch["labels"].shape == (6, 1)
    assert (out.non_tensor_batch["labels"] == [["a1"], ["a2"], ["b1"], ["b2"], ["c1"], ["c2"]]).all()
    kept = data.unfold_column_chunks(2, split_keys=["obs"])  # not split: each row's list repeated whole
    assert [list(x) for x in kept.non_tensor_batch["labels"]][:2] == [["a1", "a2"], ["a1", "a2"]]
    ragged = DataProto.from_dict({"obs": obs}, {"labels": [["a1", "a2"], ["b1"], ["c1", "c2"]]})
    with pytest.raises(ValueError, match="rows of different lengths"):
        ragged.unfold_column_chunks(2, split_keys=["labels"])


def test_pad_unpad_including_pad_larger_than_len():
    data = make_data(3, {"info": "t"})
    for divisor, pad, expected in [
        (2, 1, [0, 1, 2, 0]),
        (3, 0, [0, 1, 2]),
        (7, 4, [0, 1, 2, 0, 1, 2, 0]),
        (8, 5, [0, 1, 2, 0, 1, 2, 0, 1]),
    ]:
        padded, pad_size = pad_dataproto_to_divisor(data, size_divisor=divisor)
        assert pad_size == pad
        assert rows(padded) == expected
        assert list(padded.non_tensor_batch["labels"]) == [chr(ord("a") + i) for i in expected]
        assert padded.meta_info == {"info": "t"}
        unpadded = unpad_dataproto(padded, pad_size=pad_size)
        assert torch.equal(unpadded.batch["obs"], data.batch["obs"])
        assert list(unpadded.non_tensor_batch["labels"]) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        unpad_dataproto(data, 4)


def test_fold_unfold_batch_dim():
    data = make_data(3, {"info": "t"}).select(batch_keys=["obs"], non_tensor_batch_keys=["labels"])
    repeated = data.repeat(2, interleave=True)
    folded = fold_batch_dim(repeated, new_batch_size=3)
    assert folded.batch.batch_size == torch.Size([3])
    assert folded.batch["obs"].tolist() == [[[0, 1], [0, 1]], [[2, 3], [2, 3]], [[4, 5], [4, 5]]]
    assert folded.non_tensor_batch["labels"].tolist() == [["a", "a"], ["b", "b"], ["c", "c"]]
    folded.reorder(torch.tensor([1, 2, 0]))
    unfolded = unfold_batch_dim(folded, batch_dims=2)
    assert unfolded.batch["obs"].tolist() == [[2, 3], [2, 3], [4, 5], [4, 5], [0, 1], [0, 1]]
    assert list(unfolded.non_tensor_batch["labels"]) == list("bbccaa")
    assert unfolded.meta_info == {"info": "t"}
    with pytest.raises(ValueError):
        fold_batch_dim(repeated, new_batch_size=4)


def test_collate_fn_rebuilds_dataproto():
    data = make_data(3)
    out = collate_fn([data[i] for i in (2, 0)])
    assert rows(out) == [2, 0]
    assert out.non_tensor_batch["extra"].shape == (2,) and out.non_tensor_batch["extra"][0] == [2, 2]
    with pytest.raises(ValueError):
        collate_fn([])


# ------------------------------------------------------------------------------------------------- iteration


def _order(iterator) -> list[list[int]]:
    return [rows(mb) for mb in iterator]


def test_make_iterator_epochs_and_determinism():
    data = make_data(8, {"temperature": 1.0})
    plain = list(data.make_iterator(mini_batch_size=4, epochs=2))
    assert [rows(mb) for mb in plain] == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2
    assert all(mb.meta_info == {"temperature": 1.0} for mb in plain)
    assert all(list(mb.non_tensor_batch["labels"]) == [chr(ord("a") + r) for r in rows(mb)] for mb in plain)

    shuffle = {"shuffle": True}
    first = _order(data.make_iterator(2, epochs=3, seed=1, dataloader_kwargs=shuffle))
    second = _order(data.make_iterator(2, epochs=3, seed=1, dataloader_kwargs=shuffle))
    other = _order(data.make_iterator(2, epochs=3, seed=2, dataloader_kwargs=shuffle))
    assert first == second and first != other
    assert len(first) == 12
    for epoch in range(3):  # every epoch is a permutation of all rows
        assert sorted(functools.reduce(operator.iadd, first[4 * epoch : 4 * epoch + 4], [])) == list(range(8))
    assert first[:4] != first[4:8] or first[4:8] != first[8:]  # epochs are reshuffled

    with pytest.raises(ValueError, match="not divisible"):
        data.make_iterator(3, epochs=1)
    with pytest.raises(TypeError):
        data.make_iterator(2, epochs=1, dataloader_kwargs=[("shuffle", True)])


# --------------------------------------------------------------------------------------- conversion / storage


def test_to_and_from_tensordict():
    data = make_data(3, {"name": "abc"})
    td = data.to_tensordict()
    assert torch.equal(td["obs"], data.batch["obs"])
    assert td["labels"] == ["a", "b", "c"]
    assert td["name"] == "abc"
    back = DataProto.from_tensordict(td)
    assert torch.equal(back.batch["obs"], data.batch["obs"])
    assert back.non_tensor_batch["extra"].shape == (3,) and back.non_tensor_batch["extra"][2] == [2, 2]
    assert back.meta_info == {"name": "abc"}


def test_pickle_roundtrip_and_compact_chunks():
    data = make_data(4, {"m": {"k": 1}})
    data.batch["bf"] = torch.randn(4, 3).bfloat16()
    back = pickle.loads(pickle.dumps(data))
    assert torch.equal(back.batch["obs"], data.batch["obs"]) and back.batch["bf"].dtype == torch.bfloat16
    assert torch.equal(back.batch["bf"], data.batch["bf"])
    assert back.non_tensor_batch["extra"].shape == (4,) and back.meta_info == {"m": {"k": 1}}
    back.batch["obs"][0, 0] = -5  # deserialised tensors are writable and independent
    assert data.batch["obs"][0, 0] == 0

    big = DataProto.from_dict({"x": torch.zeros(4000, 100)})
    assert len(pickle.dumps(big.chunk(8)[0])) < len(pickle.dumps(big)) / 4  # a chunk ships only its rows


def test_save_and_load_from_disk(tmp_path):
    data = make_data(3, {"info": "t"})
    path = tmp_path / "data.pt"
    data.save_to_disk(path)
    loaded = DataProto.load_from_disk(path)
    assert torch.equal(loaded.batch["obs"], data.batch["obs"])
    assert list(loaded.non_tensor_batch["labels"]) == ["a", "b", "c"]
    assert loaded.meta_info == {"info": "t"}
    bogus = tmp_path / "bogus.pkl"
    bogus.write_bytes(pickle.dumps({"not": "a DataProto"}))
    with pytest.raises(TypeError):
        DataProto.load_from_disk(bogus)


def test_to_device_returns_self():
    data = make_data(2)
    assert data.to("cpu") is data and data.batch["obs"].device.type == "cpu"


def test_serialize_helpers_roundtrip():
    t = torch.randn(3, 4, 5)
    dtype, shape, raw = serialize_single_tensor(t)
    assert torch.equal(deserialize_single_tensor((dtype, shape, raw)), t)
    td = TensorDict(
        {
            "f": torch.randn(2, 3),
            "b": torch.tensor([[True, False], [False, True]]),
            "h": torch.randn(2, 3).bfloat16(),
            "i": torch.randint(0, 10, (2, 3)).int(),
            "n": torch.nested.as_nested_tensor([torch.randn(2, 3), torch.randn(3, 3)], layout=torch.jagged),
        },
        batch_size=(2,),
    )
    back = deserialize_tensordict(serialize_tensordict(td))
    assert back.batch_size == td.batch_size and set(back.keys()) == set(td.keys())
    for key in ("f", "b", "h", "i"):
        assert back[key].dtype == td[key].dtype and torch.equal(back[key], td[key])
    assert back["n"].is_nested
    assert all(torch.equal(x, y) for x, y in zip(back["n"].unbind(), td["n"].unbind()))
    multi = TensorDict({"x": torch.randn(2, 3, 4)}, batch_size=(2, 3), device="cpu")
    back = deserialize_tensordict(serialize_tensordict(multi))
    assert back.batch_size == multi.batch_size and str(back.device) == "cpu"


# ---------------------------------------------------------------------------------------------------- futures


def test_data_proto_future_collects_and_dispatches(monkeypatch):
    fake_ray = types.SimpleNamespace(get=lambda refs: [ref() for ref in refs])  # "refs" are thunks here
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    parts = make_data(4).chunk(2)
    future = DataProtoFuture.concat([lambda p=p: p for p in parts])
    assert rows(future.get()) == [0, 1, 2, 3]
    halves = future.chunk(2)
    assert [rows(h.get()) for h in halves] == [[0, 1], [2, 3]]
    bad = DataProtoFuture.concat([lambda: "nope"])
    with pytest.raises(TypeError):
        bad.get()


def test_protocol_import_does_not_import_ray():
    code = "import sys, verl.protocol; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_union_is_atomic_and_keeps_containers():
    data = make_data(3, {"a": 1})
    batch, non_tensor, meta = data.batch, data.non_tensor_batch, data.meta_info
    bad = DataProto.from_dict({"new": torch.ones(3)}, {"labels": ["x", "y", "z"]}, {"b": 2})
    with pytest.raises(DataProtoError, match="'labels'"):
        data.union(bad)
    assert set(data.batch.keys()) == {"obs"} and data.meta_info == {"a": 1}  # unchanged on error
    data.union(DataProto.from_dict({"new": torch.ones(3)}, meta_info={"b": 2}))
    assert data.batch is batch and data.non_tensor_batch is non_tensor and data.meta_info is meta
    assert set(batch.keys()) == {"obs", "new"} and meta == {"a": 1, "b": 2}
    empty = DataProto()
    empty.union(data)
    assert len(empty) == 3 and set(empty.non_tensor_batch) == {"labels", "extra"}


def test_roundtrip_through_ray_object_store(ray_session):
    ray = ray_session
    data = make_data(8, {"info": "t"})
    data.batch["big"] = torch.arange(8 * 20000, dtype=torch.float32).view(8, 20000)  # large enough for zero-copy

    @ray.remote(num_cpus=0)
    def second_half_doubled(d: DataProto) -> DataProto:
        part = d.chunk(2)[1]
        part.batch["big"] *= 2  # tensors received from the object store must be writable
        return part

    back = ray.get(ray.put(data))
    assert torch.equal(back.batch["big"], data.batch["big"]) and back.meta_info == {"info": "t"}
    out = ray.get(second_half_doubled.remote(data))
    assert rows(out) == [4, 5, 6, 7] and list(out.non_tensor_batch["labels"]) == list("efgh")
    assert torch.equal(out.batch["big"], data.batch["big"][4:] * 2)
