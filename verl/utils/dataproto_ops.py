"""Internals of :mod:`verl.protocol`: field checks, concatenation, column unfolding, mini-batch iteration, padding
and batch-dim folding, written against ``DataProto``'s three fields so that this module never imports the class.

``verl.protocol`` keeps ``DataProto``'s public API (upstream verl's) and re-exports the public helpers defined here
(``pad_dataproto_to_divisor``, ``unpad_dataproto``, ``fold_batch_dim``, ``unfold_batch_dim``, ``DataProtoConfig``);
their semantics are documented in ``verl.protocol``'s module docstring and in ``docs/verl_compat.md``. Functions taking
``data`` accept a ``DataProto`` (duck-typed: ``batch``, ``non_tensor_batch``, ``meta_info``, ``select_idxs``) and build
results with ``type(data)``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from verl.utils.tensordict_utils import DataProtoError, as_object_array, deep_equal, list_of_dict_to_dict_of_list

logger = logging.getLogger("verl.protocol")

__all__ = [
    "DataProtoConfig",
    "DataProtoFuture",
    "check_fields",
    "check_present",
    "common_batch_size",
    "concat_fields",
    "fold_batch_dim",
    "key_subset",
    "log_size",
    "mini_batch_iterator",
    "pad_dataproto_to_divisor",
    "rename_batch_keys",
    "row_positions",
    "split_single_dict",
    "to_non_tensor_array",
    "unfold_batch_dim",
    "unfold_columns",
    "unpad_dataproto",
]


class _DataProtoConfigMeta(type):
    """Metaclass giving :class:`DataProtoConfig` a class-level ``auto_padding`` property."""

    _config: ClassVar[dict[str, Any]] = {}
    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        from_env = os.getenv("VERL_AUTO_PADDING", "FALSE").upper() in ("TRUE", "1")
        return from_env or bool(cls._config.get(cls.auto_padding_key, False))

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"auto_padding must be a bool, got {type(enabled).__name__}")
        cls._config[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide switches. ``DataProtoConfig.auto_padding = True`` (or env ``VERL_AUTO_PADDING=1``) lets
    ``chunk`` accept sizes that do not divide evenly and lets worker groups pad inputs to the world size."""


def to_non_tensor_array(key: str, val: Any) -> np.ndarray:
    """Per-row values -> ndarray; lists/tuples always become object arrays of shape ``(B,)``."""
    if isinstance(val, np.ndarray):
        if val.ndim == 0:
            raise ValueError(f"non-tensor {key!r} is a 0-d array; expected one value per row")
        return val
    if isinstance(val, (list, tuple)):
        return as_object_array(val)
    raise TypeError(f"non-tensor {key!r} has type {type(val).__name__}; expected an np.ndarray, list or tuple")


def check_fields(batch: TensorDict | None, non_tensor_batch: dict, meta_info: dict) -> None:
    """Validate a ``DataProto``'s three fields (``DataProto.check_consistency``).

    Raises:
        TypeError: ``batch`` is not a TensorDict, ``non_tensor_batch``/``meta_info`` not dicts, or a non-tensor
            value is not an ``np.ndarray`` with at least one dimension.
        DataProtoError: the batch does not have exactly one batch dimension, or a non-tensor array's length
            differs from the batch size (the message names the key).
    """
    if batch is not None and not isinstance(batch, TensorDict):
        raise TypeError(f"DataProto.batch must be a TensorDict or None, got {type(batch).__name__}")
    if not isinstance(non_tensor_batch, dict):
        raise TypeError(f"non_tensor_batch must be a dict, got {type(non_tensor_batch).__name__}")
    if not isinstance(meta_info, dict):
        raise TypeError(f"meta_info must be a dict, got {type(meta_info).__name__}")
    expected: int | None = None
    source = "the batch"
    if batch is not None:
        if len(batch.batch_size) != 1:
            raise DataProtoError(
                f"DataProto.batch must have exactly one batch dimension (num_batch_dims=1), got batch_size "
                f"{tuple(batch.batch_size)}"
            )
        expected = int(batch.batch_size[0])
    for key, val in non_tensor_batch.items():
        if not isinstance(val, np.ndarray) or val.ndim == 0:
            raise TypeError(
                f"non_tensor_batch[{key!r}] must be an np.ndarray with a batch dimension, got {type(val).__name__}"
            )
        if expected is None:
            expected, source = int(val.shape[0]), f"non_tensor_batch[{key!r}]"
        elif val.shape[0] != expected:
            raise DataProtoError(
                f"non_tensor_batch[{key!r}] has length {val.shape[0]} but {source} has batch size {expected}"
            )


def common_batch_size(tensors: dict, num_batch_dims: int) -> tuple | None:
    """The shared leading ``num_batch_dims`` dims of ``tensors`` (None when there are none).

    Raises:
        TypeError: a value is not a ``torch.Tensor``. DataProtoError: too few dims, or the tensors disagree.
    """
    batch_size, pivot = None, None
    for key, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"tensor {key!r} has type {type(tensor).__name__}; expected torch.Tensor")
        if tensor.dim() < num_batch_dims:
            raise DataProtoError(
                f"tensor {key!r} has shape {tuple(tensor.shape)}, fewer than {num_batch_dims} batch dims"
            )
        current = tuple(tensor.shape[:num_batch_dims])
        if batch_size is None:
            batch_size, pivot = current, key
        elif current != batch_size:
            raise DataProtoError(
                f"tensor {key!r} has batch dims {current} but tensor {pivot!r} has {batch_size}; "
                f"all tensors must share the first {num_batch_dims} dim(s)"
            )
    return batch_size


def concat_fields(data: Sequence) -> tuple[TensorDict | None, dict, dict]:
    """``(batch, non_tensor_batch, meta_info)`` of the concatenation of ``data`` along the batch dim
    (``DataProto.concat``: metrics merged into a dict of lists, other meta keys must agree).

    Raises:
        ValueError: parts mixing tensor batches and none, or with different non-tensor keys.
        DataProtoError: a non-metric meta_info key has different values in two parts.
    """
    has_batch = [d.batch is not None for d in data]
    if any(has_batch) and not all(has_batch):
        raise ValueError("concat: either all parts or none must have a tensor batch")
    batch = torch.cat([d.batch for d in data], dim=0) if has_batch[0] else None
    keys0 = set(data[0].non_tensor_batch)
    for i, d in enumerate(data[1:], start=1):
        if set(d.non_tensor_batch) != keys0:
            raise ValueError(
                f"concat: part {i} has non-tensor keys {sorted(d.non_tensor_batch)}, part 0 has {sorted(keys0)}"
            )
    non_tensor = {k: np.concatenate([d.non_tensor_batch[k] for d in data], axis=0) for k in keys0}

    meta: dict[str, Any] = {}
    all_metrics: list[dict] = []
    for d in data:
        for key, val in d.meta_info.items():
            if key == "metrics":
                if isinstance(val, (list, tuple)):
                    all_metrics.extend(val)
                elif val is not None:
                    all_metrics.append(val)
            elif key in meta and not deep_equal(meta[key], val):
                raise DataProtoError(f"concat: conflicting values for meta_info key {key!r}")
            else:
                meta.setdefault(key, val)
    if all_metrics:
        meta["metrics"] = list_of_dict_to_dict_of_list(all_metrics)
    return batch, non_tensor, meta


def _stack_sequences(key: str, val: np.ndarray) -> np.ndarray:
    """``[B]`` object array whose rows are sequences of one length ``K`` -> ``[B, K]`` object array (the layout
    upstream's ``DataProto.from_dict`` gives a list of lists; this one keeps such rows whole). Anything else is
    returned as it is."""
    rows = list(val)
    if not rows or not all(isinstance(r, (list, tuple, np.ndarray)) for r in rows):
        return val
    width = len(rows[0])
    if any(len(r) != width for r in rows):
        raise ValueError(f"{key!r}: rows of different lengths cannot be split along dim 1")
    out = np.empty((len(rows), width), dtype=object)
    for i, row in enumerate(rows):
        out[i, :] = list(row)
    return out


def unfold_columns(data, n_split: int, split_keys: Sequence[str] | None):
    """``DataProto.unfold_column_chunks``: dim 1 of the ``split_keys`` entries split into ``n_split`` rows each, the
    other entries repeated (interleaved). A non-tensor entry stored as a ``[B]`` array of equal-length lists is split
    as the ``[B, K]`` array upstream stores it (each row's list cut into ``n_split`` parts).

    Raises:
        ValueError: a split entry's dim 1 is not divisible by ``n_split``. KeyError: unknown split key.
    """
    split_keys = set(split_keys or [])
    known = set(data.non_tensor_batch) | (set(data.batch.keys()) if data.batch is not None else set())
    if split_keys - known:
        raise KeyError(f"unfold_column_chunks: unknown keys {sorted(split_keys - known)}")

    def unfold(key: str, val: Any, repeat: Callable) -> Any:
        if key not in split_keys:
            return repeat(val)
        if isinstance(val, np.ndarray) and val.ndim == 1 and val.dtype == object:
            val = _stack_sequences(key, val)  # rows of equal-length lists: upstream's [B, K] object array
        if val.ndim < 2 or val.shape[1] % n_split != 0:
            raise ValueError(f"{key!r} of shape {tuple(val.shape)} cannot be split into {n_split} along dim 1")
        return val.reshape(val.shape[0] * n_split, val.shape[1] // n_split, *val.shape[2:])

    batch = None
    if data.batch is not None:
        cols = {k: unfold(k, v, lambda t: t.repeat_interleave(n_split, dim=0)) for k, v in data.batch.items()}
        batch = TensorDict(cols, batch_size=(len(data) * n_split,), device=data.batch.device)
    non_tensor = {k: unfold(k, v, lambda a: np.repeat(a, n_split, axis=0)) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(data.meta_info))


def _select_rows(data, positions: list[int]):
    """Collate function for :func:`mini_batch_iterator`: row positions -> DataProto."""
    return data.select_idxs(np.asarray(positions, dtype=np.int64))


def mini_batch_iterator(
    data, mini_batch_size: int, epochs: int, seed: int | None = None, dataloader_kwargs: dict | None = None
):
    """``DataProto.make_iterator``: ``epochs`` passes over mini-batches of ``mini_batch_size`` rows through a
    ``torch.utils.data.DataLoader`` over row positions (``seed``: reproducible shuffling).

    Raises:
        ValueError: ``len(data)`` is not divisible by ``mini_batch_size``, or bad ``epochs``.
        TypeError: ``dataloader_kwargs`` is not a dict.
    """
    if not isinstance(mini_batch_size, (int, np.integer)) or mini_batch_size < 1:
        raise ValueError(f"mini_batch_size must be a positive int, got {mini_batch_size!r}")
    if len(data) % mini_batch_size != 0:
        raise ValueError(f"DataProto of size {len(data)} is not divisible by mini_batch_size {mini_batch_size}")
    if not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"epochs must be a non-negative int, got {epochs!r}")
    dataloader_kwargs = {} if dataloader_kwargs is None else dataloader_kwargs
    if not isinstance(dataloader_kwargs, dict):
        raise TypeError(f"dataloader_kwargs must be a dict, got {type(dataloader_kwargs).__name__}")
    generator = None
    if seed is not None:
        generator = torch.Generator()
        generator.manual_seed(seed)
    loader = DataLoader(
        dataset=range(len(data)),
        batch_size=int(mini_batch_size),
        collate_fn=partial(_select_rows, data),
        generator=generator,
        **dataloader_kwargs,
    )

    def get_data():
        for _ in range(epochs):
            for mini_batch in loader:
                mini_batch.meta_info = data.meta_info
                yield mini_batch

    return iter(get_data())


def pad_dataproto_to_divisor(data, size_divisor: int) -> tuple:
    """Append rows (cycling from the start, as many times as needed) so that the length divides ``size_divisor``.

    Returns:
        ``(padded, pad_size)``; ``padded is data`` when no padding is needed.

    Raises:
        TypeError: ``data`` is not a DataProto. ValueError: ``size_divisor < 1`` or padding an empty DataProto.
    """
    if not hasattr(data, "select_idxs"):
        raise TypeError(f"expected a DataProto, got {type(data).__name__}")
    if not isinstance(size_divisor, (int, np.integer)) or size_divisor < 1:
        raise ValueError(f"size_divisor must be a positive int, got {size_divisor!r}")
    n = len(data)
    if n % size_divisor == 0:
        if n == 0:
            logger.warning("pad_dataproto_to_divisor: DataProto is empty, nothing to pad")
        return data, 0
    pad_size = int(size_divisor - n % size_divisor)
    padded = type(data).concat([data, data.select_idxs(np.arange(pad_size) % n)])
    return padded, pad_size


def unpad_dataproto(data, pad_size: int):
    """Drop the last ``pad_size`` rows (inverse of :func:`pad_dataproto_to_divisor`).

    Raises:
        ValueError: ``pad_size`` negative or larger than ``len(data)``.
    """
    if pad_size < 0 or pad_size > len(data):
        raise ValueError(f"pad_size must be in [0, {len(data)}], got {pad_size}")
    return data[: len(data) - pad_size] if pad_size else data


def fold_batch_dim(data, new_batch_size: int):
    """Reshape ``(B, ...)`` into ``(new_batch_size, B // new_batch_size, ...)``; the batch dim becomes
    ``new_batch_size``. Non-tensor arrays are reshaped the same way.

    Raises:
        ValueError: ``B`` not divisible by ``new_batch_size``.
    """
    n = len(data)
    if new_batch_size < 1 or n % new_batch_size != 0:
        raise ValueError(f"batch size {n} is not divisible by new_batch_size {new_batch_size}")
    group = n // new_batch_size
    batch = None
    if data.batch is not None:
        cols = {k: v.reshape(new_batch_size, group, *v.shape[1:]) for k, v in data.batch.items()}
        batch = TensorDict(cols, batch_size=(new_batch_size,), device=data.batch.device)
    non_tensor = {k: v.reshape(new_batch_size, group, *v.shape[1:]) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def unfold_batch_dim(data, batch_dims: int = 2):
    """Inverse of :func:`fold_batch_dim`: merge the first ``batch_dims`` dims of every entry into one batch dim.

    Raises:
        ValueError: ``batch_dims < 1`` or entries disagree on their leading dims.
    """
    if batch_dims < 1:
        raise ValueError(f"batch_dims must be >= 1, got {batch_dims}")
    lead: tuple | None = None
    entries = list(data.batch.items()) if data.batch is not None else []
    entries += list(data.non_tensor_batch.items())
    for key, val in entries:
        if val.ndim < batch_dims or (lead is not None and tuple(val.shape[:batch_dims]) != lead):
            raise ValueError(f"{key!r} of shape {tuple(val.shape)} does not share {batch_dims} leading batch dims")
        lead = tuple(val.shape[:batch_dims])
    n = int(np.prod(lead)) if lead is not None else 0
    batch = None
    if data.batch is not None:
        cols = {k: v.reshape(n, *v.shape[batch_dims:]) for k, v in data.batch.items()}
        batch = TensorDict(cols, batch_size=(n,), device=data.batch.device)
    non_tensor = {k: v.reshape(n, *v.shape[batch_dims:]) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def split_single_dict(data: dict) -> tuple[dict, dict]:
    """``DataProto.from_single_dict``: tensors and ndarrays of ``data`` apart.

    Raises:
        TypeError: a value is neither a ``torch.Tensor`` nor an ``np.ndarray`` (the key is named).
    """
    tensors, non_tensors = {}, {}
    for key, val in data.items():
        if isinstance(val, torch.Tensor):
            tensors[key] = val
        elif isinstance(val, np.ndarray):
            non_tensors[key] = val
        else:
            raise TypeError(
                f"from_single_dict: value for {key!r} has type {type(val).__name__}; expected "
                "torch.Tensor or np.ndarray"
            )
    return tensors, non_tensors


def row_positions(idxs: Any, n: int) -> np.ndarray:
    """int64 positions of ``DataProto.select_idxs``' argument: integer positions (negative allowed) or a boolean mask
    of length ``n``, as a list / ndarray / tensor.

    Raises:
        IndexError: not 1-D, a mask of another length, or a position out of range. TypeError: other dtypes.
    """
    if isinstance(idxs, torch.Tensor):
        idx_np = idxs.detach().cpu().numpy()
    else:
        idx_np = np.asarray(idxs)
        if idx_np.size == 0:
            idx_np = idx_np.astype(np.int64)
    if idx_np.ndim != 1:
        raise IndexError(f"indices must be 1-D, got shape {idx_np.shape}")
    if idx_np.dtype == bool:
        if idx_np.shape[0] != n:
            raise IndexError(f"boolean mask has length {idx_np.shape[0]} but DataProto has {n} rows")
        idx_np = np.flatnonzero(idx_np)
    elif not np.issubdtype(idx_np.dtype, np.integer):
        raise TypeError(f"indices must be integers or booleans, got dtype {idx_np.dtype}")
    idx_np = idx_np.astype(np.int64, copy=False)
    if idx_np.size and (idx_np.max() >= n or idx_np.min() < -n):
        raise IndexError(f"index out of range for DataProto of length {n}")
    return idx_np


def key_subset(source: dict, keys: Sequence[str] | None, what: str) -> dict:
    """``{k: source[k]}`` for ``keys`` (None: a copy of all). Raises KeyError naming the missing keys and ``what``."""
    if keys is None:
        return dict(source)
    missing = [k for k in keys if k not in source]
    if missing:
        raise KeyError(f"{what} keys {missing} not found; available: {sorted(source)}")
    return {k: source[k] for k in keys}


def check_present(groups) -> None:
    """``DataProto.pop``: every key of each ``(keys, pool, what)`` must be in ``pool``; KeyError naming them else."""
    for keys, pool, what in groups:
        missing = [k for k in keys if k not in pool]
        if missing:
            raise KeyError(f"cannot pop {what} keys {missing}: not present (available: {sorted(pool)})")


def rename_batch_keys(batch: TensorDict | None, old_keys: Any, new_keys: Any) -> None:
    """``DataProto.rename``: rename tensor keys of ``batch`` in place.

    Raises:
        TypeError: keys are not str / list of str. ValueError: lengths differ. KeyError: no batch, or an old key is
            missing.
    """

    def as_list(keys: Any, name: str) -> list[str]:
        if isinstance(keys, str):
            return [keys]
        if isinstance(keys, (list, tuple)) and all(isinstance(k, str) for k in keys):
            return list(keys)
        raise TypeError(f"{name} must be a str or a list of str, got {keys!r}")

    old, new = as_list(old_keys, "old_keys"), as_list(new_keys, "new_keys")
    if len(old) != len(new):
        raise ValueError(f"rename needs as many new keys as old keys, got {len(old)} and {len(new)}")
    if batch is None:
        raise KeyError(f"cannot rename {old}: this DataProto has no tensor batch")
    missing = [k for k in old if k not in batch.keys()]
    if missing:
        raise KeyError(f"cannot rename batch keys {missing}: not present")
    for old_key, new_key in zip(old, new):
        batch.rename_key_(old_key, new_key)


def log_size(data, prefix: str = "") -> None:
    """``DataProto.print_size``: log (INFO) the memory held by tensors and non-tensor arrays, in MB."""
    tensor_bytes = (
        0
        if data.batch is None
        else sum(t.numel() * t.element_size() for t in data.batch.values(include_nested=True, leaves_only=True))
    )
    array_bytes = sum(v.nbytes for v in data.non_tensor_batch.values())
    logger.info(
        "%sDataProto size: batch %.3f MB, non_tensor_batch %.3f MB",
        prefix,
        tensor_bytes / 1024**2,
        array_bytes / 1024**2,
    )


@dataclass(eq=False)
class DataProtoFuture:
    """A DataProto that is still being computed by remote workers.

    Attributes:
        collect_fn: combines the resolved list of DataProtos (typically :meth:`DataProto.concat`).
        futures: list of ``ray.ObjectRef`` each resolving to a DataProto.
        dispatch_fn: optional function applied to the collected DataProto (e.g. picking one chunk).
    """

    collect_fn: Callable[[list], Any]
    futures: list
    dispatch_fn: Callable[[Any], Any] | None = None

    @staticmethod
    def concat(data: list) -> DataProtoFuture:
        """Future of the concatenation of the DataProtos behind ``data`` (a list of ``ray.ObjectRef``)."""
        return DataProtoFuture(collect_fn=_concat_parts, futures=list(data))

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` futures, the ``i``-th resolving to ``self.get().chunk(chunks)[i]``."""
        return [
            DataProtoFuture(self.collect_fn, self.futures, dispatch_fn=partial(_pick_chunk, i, chunks))
            for i in range(chunks)
        ]

    def get(self):
        """Block on the futures (``ray.get``), collect and dispatch.

        Raises:
            TypeError: a future did not resolve to a DataProto.
        """
        import ray  # imported lazily: the protocol must not require Ray at import time

        outputs = ray.get(self.futures)
        for i, out in enumerate(outputs):
            if not hasattr(out, "non_tensor_batch"):
                raise TypeError(f"future {i} resolved to {type(out).__name__}, expected DataProto")
        result = self.collect_fn(outputs)
        if self.dispatch_fn is not None:
            result = self.dispatch_fn(result)
        return result


def _concat_parts(parts: list):
    """``DataProto.concat`` of resolved parts (the class of the first part)."""
    return type(parts[0]).concat(parts)


def _pick_chunk(index: int, chunks: int, data):
    return data.chunk(chunks)[index]
