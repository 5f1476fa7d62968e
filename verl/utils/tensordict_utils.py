"""Small helpers shared by :mod:`verl.protocol` for building, comparing and converting batch containers.

These functions know nothing about ``DataProto`` itself; they work on plain ``TensorDict`` objects, NumPy arrays and
Python values so that they can be reused by other modules (datasets, collate functions, worker groups).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

__all__ = [
    "as_object_array",
    "deep_equal",
    "arrays_equal",
    "list_of_dict_to_dict_of_list",
    "get_tensordict",
    "split_tensordict",
]


def as_object_array(values: Iterable[Any]) -> np.ndarray:
    """Build a 1-D ``dtype=object`` array holding one element per item of ``values``.

    Unlike ``np.array(values, dtype=object)``, equal-length nested lists are *not* turned into a 2-D array: the
    result always has shape ``(len(values),)`` and ``result[i] is values[i]`` for every row.

    Args:
        values: any iterable (list, tuple, generator, 1-D+ ndarray). A NumPy array is split along its first axis.

    Returns:
        np.ndarray of dtype object and shape ``(B,)``.

    Raises:
        TypeError: if ``values`` is a string/bytes or a mapping (almost always a caller mistake).
    """
    if isinstance(values, (str, bytes, Mapping)):
        raise TypeError(f"expected a sequence of per-row values, got {type(values).__name__}")
    if isinstance(values, np.ndarray) and values.ndim == 0:
        raise TypeError("expected a sequence of per-row values, got a 0-d numpy array")
    items = list(values)
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def _is_nan(x: Any) -> bool:
    return isinstance(x, (float, np.floating)) and math.isnan(x)


def deep_equal(a: Any, b: Any) -> bool:
    """Structural equality for the values found in non-tensor batches and ``meta_info``.

    Handles tensors (``torch.equal`` after a shape/dtype check), ndarrays (element-wise, NaN equals NaN), dicts,
    lists/tuples (recursively) and NaN scalars; everything else falls back to ``==`` coerced to ``bool``.

    Returns:
        bool. Never raises for incomparable values: they are reported as unequal.
    """
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.device != b.device:
            b = b.to(a.device)
        if a.is_floating_point() or a.is_complex():
            return bool(torch.equal(a, b) or ((a == b) | (a.isnan() & b.isnan())).all())
        return bool(torch.equal(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        return arrays_equal(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b))
    if _is_nan(a) and _is_nan(b):
        return True
    try:
        return bool(a == b)
    except Exception:  # ambiguous truth values and the like
        return False


def arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Element-wise equality of two NumPy arrays of any dtype (object included); NaN compares equal to NaN.

    Returns:
        bool: ``True`` when shapes match and every element is :func:`deep_equal`.
    """
    if a.shape != b.shape:
        return False
    if a.dtype != object and b.dtype != object:
        try:
            return bool(np.array_equal(a, b, equal_nan=True))
        except TypeError:  # non-numeric dtypes (strings) do not support equal_nan
            return bool(np.array_equal(a, b))
    return all(deep_equal(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1)))


def list_of_dict_to_dict_of_list(list_of_dict: Sequence[Mapping[str, Any]]) -> dict[str, list]:
    """Turn ``[{k: v0}, {k: v1}]`` into ``{k: [v0, v1]}``.

    Keys missing from some dicts are simply skipped for those dicts (the lists can then be shorter).

    Raises:
        TypeError: if an element is not a mapping.
    """
    out: dict[str, list] = {}
    for i, d in enumerate(list_of_dict):
        if not isinstance(d, Mapping):
            raise TypeError(f"element {i} is a {type(d).__name__}, expected a dict")
        for key, val in d.items():
            out.setdefault(key, []).append(val)
    return out


def get_tensordict(tensor_dict: Mapping[str, Any], non_tensor_dict: Mapping[str, Any] | None = None) -> TensorDict:
    """Build a one-batch-dim TensorDict from per-row columns plus batch-level values.

    Args:
        tensor_dict: column name -> ``torch.Tensor`` of shape ``(B, ...)``, or a list / ndarray of ``B`` Python
            objects (stored as a ``NonTensorStack``).
        non_tensor_dict: batch-level values (e.g. ``meta_info``), each stored as ``NonTensorData``.

    Returns:
        TensorDict with ``batch_size == (B,)``.

    Raises:
        ValueError: if the columns disagree on ``B`` or there is no column at all, or a key is in both dicts.
        TypeError: for an unsupported column type.
    """
    non_tensor_dict = dict(non_tensor_dict or {})
    overlap = set(tensor_dict) & set(non_tensor_dict)
    if overlap:
        raise ValueError(f"keys {sorted(overlap)} are both per-row columns and batch-level values")
    batch_size = None
    columns: dict[str, Any] = {}
    for key, val in tensor_dict.items():
        if isinstance(val, torch.Tensor):
            n = val.shape[0] if val.dim() > 0 else None
            columns[key] = val
        elif isinstance(val, (list, tuple, np.ndarray)):
            items = list(val)
            n = len(items)
            columns[key] = NonTensorStack(*[NonTensorData(data=x) for x in items], batch_size=(n,))
        else:
            raise TypeError(f"column {key!r} has type {type(val).__name__}; expected a tensor, list or ndarray")
        if n is None:
            raise ValueError(f"column {key!r} is a 0-d tensor; expected shape (B, ...)")
        if batch_size is None:
            batch_size = n
        elif n != batch_size:
            raise ValueError(f"column {key!r} has {n} rows but earlier columns have {batch_size}")
    if batch_size is None:
        raise ValueError("get_tensordict needs at least one per-row column")
    td = TensorDict(columns, batch_size=(batch_size,))
    for key, val in non_tensor_dict.items():
        td.set_non_tensor(key, val)
    return td


def split_tensordict(td: TensorDict) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray], dict[str, Any]]:
    """Inverse of :func:`get_tensordict`.

    Returns:
        ``(tensors, non_tensors, meta_info)``: tensor columns, object-array columns of shape ``(B,)`` (from
        ``NonTensorStack`` entries) and batch-level values (from ``NonTensorData`` entries).

    Raises:
        TypeError: if ``td`` is not a TensorDict or holds a nested TensorDict.
    """
    if not isinstance(td, TensorDict):
        raise TypeError(f"expected a TensorDict, got {type(td).__name__}")
    tensors: dict[str, torch.Tensor] = {}
    non_tensors: dict[str, np.ndarray] = {}
    meta_info: dict[str, Any] = {}
    for key in td.keys():
        val = td.get(key)
        if isinstance(val, NonTensorStack):
            non_tensors[key] = as_object_array(val.tolist())
        elif isinstance(val, NonTensorData):
            meta_info[key] = val.data
        elif isinstance(val, torch.Tensor):
            tensors[key] = val
        else:
            raise TypeError(f"entry {key!r} of type {type(val).__name__} is not supported (nested TensorDict?)")
    return tensors, non_tensors, meta_info
