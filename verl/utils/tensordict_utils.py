"""Helpers behind :mod:`verl.protocol`: building, comparing, merging and (de)serialising batch containers.

They work on plain ``TensorDict`` objects, NumPy arrays and Python values (never on ``DataProto`` itself) so that
datasets, collate functions and worker groups can reuse them. ``verl.protocol`` re-exports the public ones under
their upstream names (``union_tensor_dict``, ``serialize_tensordict`` ...).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

__all__ = [
    "DataProtoError",
    "arrays_equal",
    "as_object_array",
    "deep_equal",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "get_tensordict",
    "list_of_dict_to_dict_of_list",
    "serialize_single_tensor",
    "serialize_tensordict",
    "split_tensordict",
    "union_numpy_dict",
    "union_tensor_dict",
    "union_two_dict",
]

logger = logging.getLogger(__name__)


class DataProtoError(ValueError, AssertionError):
    """Invalid DataProto operation (conflicting union, uneven chunk, inconsistent sizes ...).

    It is a ``ValueError``; it also derives from ``AssertionError`` because upstream verl signals these conditions
    with ``assert``, so code written against upstream (``except AssertionError`` / ``pytest.raises(AssertionError)``)
    keeps working.
    """


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


def deep_equal(a: Any, b: Any, _seen: set | None = None) -> bool:
    """Structural equality for the values found in non-tensor batches and ``meta_info``.

    Handles tensors (``torch.equal`` after a shape/dtype check), ndarrays (element-wise, NaN equals NaN), dicts,
    lists/tuples (recursively, self-referencing containers included) and NaN scalars; everything else falls back to
    ``==`` coerced to ``bool``.

    Returns:
        bool. Never raises for incomparable values: they are reported as unequal.
    """
    if a is b:
        return True
    if _seen is None:
        _seen = set()
    pair = (id(a), id(b))
    if pair in _seen:  # already comparing this pair further up: a cycle, assume equal (co-inductively)
        return True
    if isinstance(a, (np.ndarray, Mapping, list, tuple)):
        _seen = _seen | {pair}
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
        return arrays_equal(a, b, _seen)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k], _seen) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(deep_equal(x, y, _seen) for x, y in zip(a, b))
    if _is_nan(a) and _is_nan(b):
        return True
    try:
        return bool(a == b)
    except Exception:  # ambiguous truth values and the like
        return False


def arrays_equal(a: np.ndarray, b: np.ndarray, _seen: set | None = None) -> bool:
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
    return all(deep_equal(x, y, _seen) for x, y in zip(a.reshape(-1), b.reshape(-1)))


def union_two_dict(dict1: dict, dict2: dict) -> dict:
    """Merge ``dict2`` into ``dict1`` in place and return ``dict1``.

    Raises:
        ValueError: if a key present in both has different values (compared with :func:`deep_equal`).
    """
    for key, val in dict2.items():
        if key in dict1 and not deep_equal(dict1[key], val):
            raise DataProtoError(f"conflicting values for key {key!r}: {dict1[key]!r} vs {val!r}")
        dict1[key] = val
    return dict1


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the entries of ``tensor_dict2`` to ``tensor_dict1`` in place and return ``tensor_dict1``.

    Raises:
        ValueError: if the batch sizes differ, or a shared key holds different tensors.
    """
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise DataProtoError(
            f"cannot union TensorDicts with batch sizes {tuple(tensor_dict1.batch_size)} and "
            f"{tuple(tensor_dict2.batch_size)}"
        )
    for key in tensor_dict2.keys():
        val = tensor_dict2[key]
        if key in tensor_dict1.keys():
            if not deep_equal(tensor_dict1[key], val):
                raise DataProtoError(f"conflicting tensors for key {key!r} in union: same key, different values")
        else:
            tensor_dict1[key] = val
    return tensor_dict1


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict:
    """Add the arrays of ``tensor_dict2`` to ``tensor_dict1`` in place and return ``tensor_dict1``.

    Raises:
        TypeError: if a value is not an ``np.ndarray``.
        ValueError: if a shared key holds different arrays (NaN equals NaN; object elements compared deeply).
    """
    for key, val in tensor_dict2.items():
        if not isinstance(val, np.ndarray):
            raise TypeError(f"non-tensor value {key!r} must be an np.ndarray, got {type(val).__name__}")
        if key in tensor_dict1:
            if not arrays_equal(tensor_dict1[key], val):
                raise DataProtoError(f"conflicting non-tensor arrays for key {key!r} in union")
        else:
            tensor_dict1[key] = val
    return tensor_dict1


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


# ---------------------------------------------------------------------------------------------------------------------
# compact serialisation (used by DataProto pickling, hence by Ray transfers)
# ---------------------------------------------------------------------------------------------------------------------


def serialize_single_tensor(tensor: torch.Tensor) -> tuple[str, tuple[int, ...], np.ndarray]:
    """Encode a dense tensor as ``(dtype_name, shape, raw_bytes)``.

    ``raw_bytes`` is a 1-D ``uint8`` NumPy array holding only this tensor's elements (a view of a larger storage
    does not drag the whole storage along, unlike plain tensor pickling). Works for every dtype, bf16 and bool
    included. The tensor is moved to CPU first.

    Raises:
        TypeError: not a tensor, or a nested/sparse tensor (use :func:`serialize_tensordict` for nested ones).
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.is_nested or tensor.layout != torch.strided:
        raise TypeError(f"serialize_single_tensor supports dense strided tensors only, got layout {tensor.layout}")
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy() if flat.numel() else np.empty(0, dtype=np.uint8)
    return str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), raw


def deserialize_single_tensor(encoded: tuple[str, Sequence[int], Any]) -> torch.Tensor:
    """Inverse of :func:`serialize_single_tensor`; returns a CPU tensor that owns writable memory.

    Raises:
        ValueError: unknown dtype name or a byte count that does not match the shape.
    """
    dtype_name, shape, raw = encoded
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown tensor dtype {dtype_name!r}")
    buf = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw
    if not buf.flags.writeable:  # e.g. zero-copy buffers from the Ray object store
        buf = buf.copy()
    numel = int(np.prod(shape)) if len(shape) else 1
    itemsize = torch.empty((), dtype=dtype).element_size()
    if buf.size != numel * itemsize:
        raise ValueError(f"{buf.size} bytes cannot hold a {dtype_name} tensor of shape {tuple(shape)}")
    if numel == 0:
        return torch.empty(tuple(shape), dtype=dtype)
    return torch.from_numpy(buf).view(dtype).reshape(tuple(shape))


def serialize_tensordict(td: TensorDict) -> tuple[tuple[int, ...], str | None, list[tuple[str, str, Any]]]:
    """Encode a TensorDict of (dense or nested) tensors as ``(batch_size, device, items)``.

    ``items`` is a list of ``(key, kind, payload)`` where ``kind`` is ``"dense"`` (payload from
    :func:`serialize_single_tensor`) or ``"nested"`` (payload ``(layout_name, [encoded components])``).

    Raises:
        TypeError: an entry is not a tensor (non-tensor data and nested TensorDicts are not supported).
    """
    items: list[tuple[str, str, Any]] = []
    for key in td.keys():
        val = td.get(key)
        if not isinstance(val, torch.Tensor) or isinstance(val, TensorDict):
            raise TypeError(f"serialize_tensordict: entry {key!r} is a {type(val).__name__}, expected a tensor")
        if val.is_nested:
            layout = "jagged" if val.layout == torch.jagged else "strided"
            items.append((key, "nested", (layout, [serialize_single_tensor(t) for t in val.unbind()])))
        else:
            items.append((key, "dense", serialize_single_tensor(val)))
    device = None if td.device is None else str(td.device)
    return tuple(td.batch_size), device, items


def deserialize_tensordict(encoded: tuple[Sequence[int], str | None, list[tuple[str, str, Any]]]) -> TensorDict:
    """Inverse of :func:`serialize_tensordict`.

    A CUDA device is kept when CUDA is available; otherwise the TensorDict is placed on CPU (with a warning).

    Raises:
        ValueError: an unknown item kind.
    """
    batch_size, device, items = encoded
    source: dict[str, torch.Tensor] = {}
    for key, kind, payload in items:
        if kind == "dense":
            source[key] = deserialize_single_tensor(payload)
        elif kind == "nested":
            layout_name, parts = payload
            layout = torch.jagged if layout_name == "jagged" else torch.strided
            source[key] = torch.nested.as_nested_tensor([deserialize_single_tensor(p) for p in parts], layout=layout)
        else:
            raise ValueError(f"unknown serialized item kind {kind!r} for key {key!r}")
    if device is not None and device.startswith("cuda") and not torch.cuda.is_available():
        logger.warning("deserialize_tensordict: %s is not available here, loading onto cpu", device)
        device = "cpu"
    return TensorDict(source, batch_size=tuple(batch_size), device=device)
