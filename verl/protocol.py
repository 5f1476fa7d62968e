"""``DataProto``: the batch container every trainer component passes around.

A ``DataProto`` bundles three things that always travel together:

* ``batch`` -- a :class:`tensordict.TensorDict` with one batch dimension ``B`` (``input_ids``, ``attention_mask``,
  ``responses``, ``old_log_probs`` ... each of shape ``(B, ...)``), or ``None`` when there are no tensors;
* ``non_tensor_batch`` -- ``dict[str, np.ndarray]``, each array of length ``B`` (normally ``dtype=object`` and shape
  ``(B,)``: ``uid``, ``data_source``, ``reward_model``, ``extra_info`` ...);
* ``meta_info`` -- a plain dict of batch-level values (``eos_token_id``, ``temperature``, ``metrics`` ...).

Semantics follow upstream verl (not the ToolRL-era fork): indexing with a slice / list / array / tensor / boolean
mask returns a ``DataProto`` (an ``int`` returns a :class:`DataProtoItem`), ``concat`` merges ``meta_info['metrics']``,
and :func:`pad_dataproto_to_divisor` works when the padding is longer than the data.

Copy semantics: operations that select rows (indexing, ``slice``, ``chunk``, ``split``) return views or copies exactly
as the underlying ``TensorDict`` / NumPy indexing does (basic slices and ``int`` indices share storage, fancy indices
copy); ``select(deepcopy=False)`` and ``pop`` share the tensors and the non-tensor arrays with the source;
``select(deepcopy=True)`` returns fully independent data. ``meta_info`` dicts are shallow-copied for derived objects.
"""
from __future__ import annotations

import copy
import logging
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from verl.utils.tensordict_utils import (
    DataProtoError,
    as_object_array,
    deep_equal,
    deserialize_single_tensor,
    deserialize_tensordict,
    get_tensordict,
    list_of_dict_to_dict_of_list,
    serialize_single_tensor,
    serialize_tensordict,
    split_tensordict,
    union_numpy_dict,
    union_tensor_dict,
    union_two_dict,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DataProto",
    "DataProtoItem",
    "DataProtoFuture",
    "DataProtoConfig",
    "DataProtoError",
    "pad_dataproto_to_divisor",
    "unpad_dataproto",
    "union_two_dict",
    "union_tensor_dict",
    "union_numpy_dict",
    "list_of_dict_to_dict_of_list",
    "fold_batch_dim",
    "unfold_batch_dim",
    "collate_fn",
    "serialize_single_tensor",
    "deserialize_single_tensor",
    "serialize_tensordict",
    "deserialize_tensordict",
]


class _DataProtoConfigMeta(type):
    """Metaclass giving :class:`DataProtoConfig` a class-level ``auto_padding`` property."""

    _config: dict[str, Any] = {}
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


def _to_non_tensor_array(key: str, val: Any) -> np.ndarray:
    """Per-row values -> ndarray; lists/tuples always become object arrays of shape ``(B,)``."""
    if isinstance(val, np.ndarray):
        if val.ndim == 0:
            raise ValueError(f"non-tensor {key!r} is a 0-d array; expected one value per row")
        return val
    if isinstance(val, (list, tuple)):
        return as_object_array(val)
    raise TypeError(f"non-tensor {key!r} has type {type(val).__name__}; expected an np.ndarray, list or tuple")


# ---------------------------------------------------------------------------------------------------------------------
# DataProtoItem / DataProto
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class DataProtoItem:
    """One row of a :class:`DataProto` (what ``data[i]`` returns).

    Attributes:
        batch: 0-batch-dim TensorDict (each tensor is the row, shape ``(...)``), or ``None``.
        non_tensor_batch: key -> the row's element of each non-tensor array.
        meta_info: the parent's meta_info (same dict object).
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)


@dataclass(eq=False)
class DataProto:
    """Batch container: a one-batch-dim TensorDict, per-row NumPy arrays and batch-level ``meta_info``.

    Build it with :meth:`from_dict` / :meth:`from_single_dict` rather than the raw constructor. The constructor
    validates with :meth:`check_consistency`.

    Raises (constructor):
        TypeError / ValueError: see :meth:`check_consistency`.
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.non_tensor_batch is None:
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        self.check_consistency()

    # ----------------------------------------------------------------------------------------------------- basics

    def __len__(self) -> int:
        """Number of rows ``B`` (0 when there is neither a batch nor non-tensor data)."""
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        if self.non_tensor_batch:
            return int(next(iter(self.non_tensor_batch.values())).shape[0])
        return 0

    def check_consistency(self) -> None:
        """Validate the three fields.

        Raises:
            TypeError: ``batch`` is not a TensorDict, ``non_tensor_batch``/``meta_info`` not dicts, or a non-tensor
                value is not an ``np.ndarray`` with at least one dimension.
            DataProtoError: the batch does not have exactly one batch dimension, or a non-tensor array's length
                differs from the batch size (the message names the key).
        """
        if self.batch is not None and not isinstance(self.batch, TensorDict):
            raise TypeError(f"DataProto.batch must be a TensorDict or None, got {type(self.batch).__name__}")
        if not isinstance(self.non_tensor_batch, dict):
            raise TypeError(f"non_tensor_batch must be a dict, got {type(self.non_tensor_batch).__name__}")
        if not isinstance(self.meta_info, dict):
            raise TypeError(f"meta_info must be a dict, got {type(self.meta_info).__name__}")
        expected: int | None = None
        source = "the batch"
        if self.batch is not None:
            if len(self.batch.batch_size) != 1:
                raise DataProtoError(
                    f"DataProto.batch must have exactly one batch dimension (num_batch_dims=1), got batch_size "
                    f"{tuple(self.batch.batch_size)}"
                )
            expected = int(self.batch.batch_size[0])
        for key, val in self.non_tensor_batch.items():
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

    # ----------------------------------------------------------------------------------------------- constructors

    @classmethod
    def from_single_dict(
        cls, data: dict[str, torch.Tensor | np.ndarray], meta_info: dict | None = None, auto_padding: bool = False
    ) -> DataProto:
        """Split ``data`` into tensors (-> ``batch``) and ndarrays (-> ``non_tensor_batch``).

        Raises:
            TypeError: a value is neither a ``torch.Tensor`` nor an ``np.ndarray`` (the message names the key).
        """
        tensors, non_tensors = {}, {}
        for key, val in data.items():
            if isinstance(val, torch.Tensor):
                tensors[key] = val
            elif isinstance(val, np.ndarray):
                non_tensors[key] = val
            else:
                raise TypeError(
                    f"from_single_dict: value for {key!r} has type {type(val).__name__}; expected torch.Tensor or "
                    f"np.ndarray"
                )
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding)

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build a DataProto; the batch size is the first ``num_batch_dims`` dims of the tensors.

        Args:
            tensors: key -> tensor of shape ``(*batch_dims, ...)``; may be empty/None if ``non_tensors`` is given.
            non_tensors: key -> ndarray (kept as is) or list/tuple (converted to an object array of shape ``(B,)``,
                even when the rows are equal-length lists).
            meta_info: batch-level dict (not copied).
            num_batch_dims: number of leading batch dims shared by the tensors. Kept for API compatibility: as in
                upstream, a DataProto only supports one batch dim, so values other than 1 end in DataProtoError
                (use :func:`fold_batch_dim` for grouped views).
            auto_padding: mark this DataProto so that ``chunk`` allows uneven sizes.

        Raises:
            TypeError: a tensor value is not a ``torch.Tensor`` or a non-tensor value is not array-like.
            ValueError: ``num_batch_dims < 1``.
            DataProtoError: tensors disagree on the batch dims, ``num_batch_dims != 1``, or lengths are
                inconsistent (see :meth:`check_consistency`).
        """
        tensors = dict(tensors or {})
        non_tensors = dict(non_tensors or {})
        meta_info = {} if meta_info is None else meta_info
        if not isinstance(num_batch_dims, int) or num_batch_dims < 1:
            raise ValueError(f"num_batch_dims must be a positive int, got {num_batch_dims!r}")

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
        non_tensors = {key: _to_non_tensor_array(key, val) for key, val in non_tensors.items()}
        if auto_padding:
            meta_info[DataProtoConfig.auto_padding_key] = True
        batch = TensorDict(source=tensors, batch_size=batch_size) if tensors else None
        return cls(batch=batch, non_tensor_batch=non_tensors, meta_info=meta_info)

    @classmethod
    def from_tensordict(
        cls, tensor_dict: TensorDict, meta_info: dict | None = None, num_batch_dims: int = 1
    ) -> DataProto:
        """Inverse of :meth:`to_tensordict`: tensors -> ``batch``, ``NonTensorStack`` -> object arrays,
        ``NonTensorData`` -> ``meta_info`` (merged with ``meta_info``; the explicit argument wins).

        Raises:
            TypeError: not a TensorDict / unsupported entries.
        """
        tensors, non_tensors, meta = split_tensordict(tensor_dict)
        meta.update(meta_info or {})
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta, num_batch_dims=num_batch_dims)

    def to_tensordict(self) -> TensorDict:
        """One TensorDict holding tensors, non-tensor columns (as ``NonTensorStack``) and meta_info
        (as ``NonTensorData``).

        Raises:
            ValueError: a key is used by both the batch and the non-tensor batch / meta_info, or the DataProto
                holds no per-row data.
        """
        columns: dict[str, Any] = {} if self.batch is None else dict(self.batch.items())
        overlap = set(columns) & set(self.non_tensor_batch)
        if overlap:
            raise ValueError(f"keys {sorted(overlap)} are in both batch and non_tensor_batch")
        columns.update(self.non_tensor_batch)
        return get_tensordict(columns, self.meta_info)

    # ------------------------------------------------------------------------------------------------- indexing

    def __getitem__(self, item: Any) -> DataProto | DataProtoItem:
        """``int`` -> :class:`DataProtoItem`; ``slice`` / list / ndarray / tensor (int indices or bool mask) ->
        :class:`DataProto`.

        Raises:
            TypeError: unsupported index type.
            IndexError: index out of range or mask of the wrong length.
        """
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            return self._item(int(item))
        if isinstance(item, (np.ndarray, torch.Tensor)) and item.ndim == 0 and item.dtype not in (bool, torch.bool):
            return self._item(int(item))
        if isinstance(item, (list, tuple, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        raise TypeError(f"unsupported index type {type(item).__name__} for DataProto")

    def _item(self, idx: int) -> DataProtoItem:
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for DataProto of length {n}")
        batch = self.batch[idx] if self.batch is not None else None
        non_tensor = {key: val[idx] for key, val in self.non_tensor_batch.items()}
        return DataProtoItem(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def select_idxs(self, idxs: Sequence[int] | Sequence[bool] | np.ndarray | torch.Tensor) -> DataProto:
        """Rows at integer positions ``idxs`` (any order, repeats allowed) or where the boolean mask is true.

        Returns:
            DataProto with copied rows and a shallow copy of ``meta_info``.

        Raises:
            IndexError: a boolean mask whose length is not ``len(self)``, or positions out of range.
            TypeError: non-integer, non-boolean indices.
        """
        if isinstance(idxs, torch.Tensor):
            idx_np = idxs.detach().cpu().numpy()
        else:
            idx_np = np.asarray(idxs)
            if idx_np.size == 0:
                idx_np = idx_np.astype(np.int64)
        if idx_np.ndim != 1:
            raise IndexError(f"indices must be 1-D, got shape {idx_np.shape}")
        n = len(self)
        if idx_np.dtype == bool:
            if idx_np.shape[0] != n:
                raise IndexError(f"boolean mask has length {idx_np.shape[0]} but DataProto has {n} rows")
            idx_np = np.flatnonzero(idx_np)
        elif not np.issubdtype(idx_np.dtype, np.integer):
            raise TypeError(f"indices must be integers or booleans, got dtype {idx_np.dtype}")
        idx_np = idx_np.astype(np.int64, copy=False)
        if idx_np.size and (idx_np.max() >= n or idx_np.min() < -n):
            raise IndexError(f"index out of range for DataProto of length {n}")
        batch = None
        if self.batch is not None:
            index = torch.from_numpy(idx_np)
            if self.batch.device is not None and self.batch.device.type != "cpu":
                index = index.to(self.batch.device)
            batch = self.batch[index]
        non_tensor = {key: val[idx_np] for key, val in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(self.meta_info))

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows ``[start:end:step]`` as a DataProto (tensors and arrays are views of the parent's storage)."""
        sl = slice(start, end, step)
        batch = self.batch[sl] if self.batch is not None else None
        non_tensor = {key: val[sl] for key, val in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(self.meta_info))

    # ---------------------------------------------------------------------------------------- key manipulation

    def select(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A DataProto with a subset of keys (``None`` keeps all keys of that field).

        With ``deepcopy=False`` the result shares tensors and arrays with ``self``; with ``deepcopy=True`` all three
        fields are deep-copied.

        Raises:
            KeyError: a requested key does not exist (message names it).
        """
        batch = self.batch
        if batch_keys is not None and batch is not None:
            missing = [k for k in batch_keys if k not in batch.keys()]
            if missing:
                raise KeyError(f"batch keys {missing} not found; available: {sorted(batch.keys())}")
            batch = batch.select(*batch_keys)
        elif batch_keys is not None and batch_keys:
            raise KeyError(f"batch keys {list(batch_keys)} requested but this DataProto has no tensor batch")
        non_tensor = self._subset(self.non_tensor_batch, non_tensor_batch_keys, "non_tensor_batch")
        meta = self._subset(self.meta_info, meta_info_keys, "meta_info")
        if deepcopy:
            batch = batch.clone() if batch is not None else None
            non_tensor, meta = copy.deepcopy(non_tensor), copy.deepcopy(meta)
        elif batch is self.batch and batch is not None:
            batch = batch.select(*batch.keys())  # new container, same tensors
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    @staticmethod
    def _subset(source: dict, keys: Sequence[str] | None, what: str) -> dict:
        if keys is None:
            return dict(source)
        missing = [k for k in keys if k not in source]
        if missing:
            raise KeyError(f"{what} keys {missing} not found; available: {sorted(source)}")
        return {k: source[k] for k in keys}

    def pop(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
    ) -> DataProto:
        """Remove the given keys from ``self`` and return them as a new DataProto (``None`` pops nothing).

        Raises:
            KeyError: a key is missing (nothing is removed in that case).
        """
        batch_keys, non_tensor_batch_keys = list(batch_keys or []), list(non_tensor_batch_keys or [])
        meta_info_keys = list(meta_info_keys or [])
        available = set(self.batch.keys()) if self.batch is not None else set()
        for keys, pool, what in (
            (batch_keys, available, "batch"),
            (non_tensor_batch_keys, self.non_tensor_batch, "non_tensor_batch"),
            (meta_info_keys, self.meta_info, "meta_info"),
        ):
            missing = [k for k in keys if k not in pool]
            if missing:
                raise KeyError(f"cannot pop {what} keys {missing}: not present (available: {sorted(pool)})")
        tensors = {k: self.batch.pop(k) for k in batch_keys}
        non_tensors = {k: self.non_tensor_batch.pop(k) for k in non_tensor_batch_keys}
        meta = {k: self.meta_info.pop(k) for k in meta_info_keys}
        if not tensors and not non_tensors:
            return type(self)(batch=None, non_tensor_batch={}, meta_info=meta)
        batch = TensorDict(tensors, batch_size=self.batch.batch_size, device=self.batch.device) if tensors else None
        return type(self)(batch=batch, non_tensor_batch=non_tensors, meta_info=meta)

    def rename(self, old_keys: str | Sequence[str] | None = None, new_keys: str | Sequence[str] | None = None):
        """Rename batch (tensor) keys in place; returns ``self``.

        Raises:
            TypeError: keys are not str / list of str. ValueError: lengths differ. KeyError: an old key is missing.
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
        if self.batch is None:
            raise KeyError(f"cannot rename {old}: this DataProto has no tensor batch")
        missing = [k for k in old if k not in self.batch.keys()]
        if missing:
            raise KeyError(f"cannot rename batch keys {missing}: not present")
        for old_key, new_key in zip(old, new):
            self.batch.rename_key_(old_key, new_key)
        return self

    def union(self, other: DataProto) -> DataProto:
        """Add ``other``'s keys to ``self`` in place and return ``self``.

        Shared keys are allowed when their values are equal. The operation is atomic: on error ``self`` is left
        unchanged. The ``batch`` TensorDict and the two dicts are updated in place (same objects afterwards).

        Raises:
            TypeError: ``other`` is not a DataProto.
            DataProtoError: lengths differ, or a shared tensor / non-tensor / meta_info key has different values
                (the message names the key).
        """
        if not isinstance(other, DataProto):
            raise TypeError(f"union expects a DataProto, got {type(other).__name__}")
        self_has_rows = self.batch is not None or bool(self.non_tensor_batch)
        other_has_rows = other.batch is not None or bool(other.non_tensor_batch)
        if self_has_rows and other_has_rows and len(self) != len(other):
            raise DataProtoError(f"cannot union DataProtos of lengths {len(self)} and {len(other)}")
        # merge into shallow copies first so that a conflict leaves self untouched
        merged_batch = None
        if other.batch is not None:
            base = other.batch if self.batch is None else self.batch
            merged_batch = union_tensor_dict(base.select(*base.keys()), other.batch)
        merged_non_tensor = union_numpy_dict(dict(self.non_tensor_batch), other.non_tensor_batch)
        merged_meta = union_two_dict(dict(self.meta_info), other.meta_info)
        if merged_batch is not None:
            if self.batch is None:
                self.batch = merged_batch
            else:
                self.batch.update(merged_batch)
        self.non_tensor_batch.update(merged_non_tensor)
        self.meta_info.update(merged_meta)
        self.check_consistency()
        return self

    # ------------------------------------------------------------------------------------------- split / combine

    def is_padding_enabled(self) -> bool:
        """True when this DataProto or the process-wide :class:`DataProtoConfig` enables auto padding."""
        return bool(self.meta_info.get(DataProtoConfig.auto_padding_key, False)) or DataProtoConfig.auto_padding

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append ``padding_size`` copies of the last row (or the first with ``padding_candidate='first'``) in place.

        Raises:
            ValueError: negative ``padding_size`` or padding an empty DataProto.
        """
        if padding_size < 0:
            raise ValueError(f"padding_size must be >= 0, got {padding_size}")
        if padding_size == 0:
            return
        if len(self) == 0:
            raise ValueError("cannot pad an empty DataProto")
        row = self.select_idxs([0 if padding_candidate == "first" else len(self) - 1])
        padded = DataProto.concat([self, row.repeat(padding_size)])
        self.batch, self.non_tensor_batch = padded.batch, padded.non_tensor_batch

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into ``chunks`` consecutive parts of equal size (views of ``self``).

        With auto padding enabled uneven sizes are allowed (``np.array_split`` sizing: the first parts are one row
        longer).

        Raises:
            ValueError: ``chunks < 1``, or ``len(self)`` not divisible by ``chunks`` without auto padding.
        """
        if not isinstance(chunks, (int, np.integer)) or chunks < 1:
            raise ValueError(f"chunks must be a positive int, got {chunks!r}")
        n = len(self)
        if n % chunks != 0 and not self.is_padding_enabled():
            raise DataProtoError(
                f"only support equal chunk: DataProto of size {n} cannot be split into {chunks} chunks"
            )
        base, extra = divmod(n, int(chunks))
        bounds = np.cumsum([0] + [base + (1 if i < extra else 0) for i in range(int(chunks))])
        return [self.slice(int(bounds[i]), int(bounds[i + 1])) for i in range(int(chunks))]

    def split(self, split_size: int) -> list[DataProto]:
        """Consecutive parts of ``split_size`` rows (the last may be shorter).

        Raises:
            ValueError: ``split_size < 1``.
        """
        if not isinstance(split_size, (int, np.integer)) or split_size < 1:
            raise ValueError(f"split_size must be a positive int, got {split_size!r}")
        return [self.slice(i, i + int(split_size)) for i in range(0, len(self), int(split_size))]

    @staticmethod
    def concat(data: Sequence[DataProto]) -> DataProto:
        """Concatenate along the batch dim; the result has the type of ``data[0]``.

        ``meta_info``: keys other than ``metrics`` are the union of the parts' keys and must agree where shared (so
        with identical meta_info this "keeps the first"). ``meta_info['metrics']`` of all parts (each a dict, or a
        list of dicts) are merged into one dict of lists, ``{name: [value from part 0, value from part 1, ...]}``,
        the form ``reduce_metrics`` expects when workers each report their own metrics.

        Raises:
            ValueError: empty input, or parts with different non-tensor keys / mixing parts with and without a
                tensor batch.
            DataProtoError: a non-metric meta_info key has different values in two parts (message names the key).
            TypeError: a part is not a DataProto.
        """
        data = list(data)
        if not data:
            raise ValueError("concat needs at least one DataProto")
        for i, d in enumerate(data):
            if not isinstance(d, DataProto):
                raise TypeError(f"concat: element {i} is a {type(d).__name__}, expected DataProto")
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
        return type(data[0])(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def reorder(self, indices: torch.Tensor | np.ndarray | Sequence[int]) -> None:
        """Permute rows in place so that new row ``i`` is old row ``indices[i]``.

        Raises:
            ValueError: ``indices`` has the wrong length. IndexError: out-of-range positions.
        """
        idx_np = indices.detach().cpu().numpy() if isinstance(indices, torch.Tensor) else np.asarray(indices)
        if idx_np.ndim != 1 or idx_np.shape[0] != len(self):
            raise ValueError(f"reorder needs {len(self)} indices, got shape {idx_np.shape}")
        reordered = self.select_idxs(idx_np)
        self.batch, self.non_tensor_batch = reordered.batch, reordered.non_tensor_batch

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every row ``repeat_times`` times.

        ``interleave=True``: ``[a, a, b, b]``; ``interleave=False``: ``[a, b, a, b]``.

        Raises:
            ValueError: ``repeat_times < 1``.
        """
        if not isinstance(repeat_times, (int, np.integer)) or repeat_times < 1:
            raise ValueError(f"repeat_times must be a positive int, got {repeat_times!r}")
        n = len(self)
        rows = np.arange(n)
        order = np.repeat(rows, repeat_times) if interleave else np.tile(rows, repeat_times)
        return self.select_idxs(order)

    def sample_level_repeat(self, repeat_times: Sequence[int] | np.ndarray | torch.Tensor) -> DataProto:
        """Repeat row ``i`` ``repeat_times[i]`` times (consecutively); a count of 0 drops the row.

        Raises:
            ValueError: wrong number of counts or negative counts.
        """
        counts = (
            repeat_times.detach().cpu().numpy() if isinstance(repeat_times, torch.Tensor) else np.asarray(repeat_times)
        )
        if counts.ndim != 1 or counts.shape[0] != len(self):
            raise ValueError(f"sample_level_repeat needs {len(self)} counts, got shape {counts.shape}")
        if not np.issubdtype(counts.dtype, np.integer) or (counts < 0).any():
            raise ValueError("repeat counts must be non-negative integers")
        return self.select_idxs(np.repeat(np.arange(len(self)), counts))

    def unfold_column_chunks(self, n_split: int, split_keys: Sequence[str] | None = None) -> DataProto:
        """Split dim 1 of the ``split_keys`` entries into ``n_split`` parts and move them to the batch dim.

        Entries not in ``split_keys`` are repeated (interleaved) ``n_split`` times so every row stays aligned. The
        result has ``len(self) * n_split`` rows.

        Raises:
            ValueError: a split entry's dim 1 is not divisible by ``n_split``. KeyError: unknown split key.
        """
        split_keys = set(split_keys or [])
        known = set(self.non_tensor_batch) | (set(self.batch.keys()) if self.batch is not None else set())
        if split_keys - known:
            raise KeyError(f"unfold_column_chunks: unknown keys {sorted(split_keys - known)}")

        def unfold(key: str, val: Any, repeat: Callable) -> Any:
            if key not in split_keys:
                return repeat(val)
            if val.ndim < 2 or val.shape[1] % n_split != 0:
                raise ValueError(f"{key!r} of shape {tuple(val.shape)} cannot be split into {n_split} along dim 1")
            return val.reshape(val.shape[0] * n_split, val.shape[1] // n_split, *val.shape[2:])

        batch = None
        if self.batch is not None:
            cols = {k: unfold(k, v, lambda t: t.repeat_interleave(n_split, dim=0)) for k, v in self.batch.items()}
            batch = TensorDict(cols, batch_size=(len(self) * n_split,), device=self.batch.device)
        non_tensor = {
            k: unfold(k, v, lambda a: np.repeat(a, n_split, axis=0)) for k, v in self.non_tensor_batch.items()
        }
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(self.meta_info))

    # ---------------------------------------------------------------------------------------- iteration / device

    def make_iterator(
        self, mini_batch_size: int, epochs: int, seed: int | None = None, dataloader_kwargs: dict | None = None
    ):
        """Iterate ``epochs`` times over mini-batches of ``mini_batch_size`` rows.

        Uses a ``torch.utils.data.DataLoader`` over row positions (so ``dataloader_kwargs`` such as
        ``{"shuffle": True}`` behave as usual); with ``seed`` the shuffling is reproducible. Each yielded mini-batch
        is a DataProto whose ``meta_info`` is ``self.meta_info``.

        Raises:
            ValueError: ``len(self)`` is not divisible by ``mini_batch_size``, or bad ``epochs``.
            TypeError: ``dataloader_kwargs`` is not a dict.
        """
        if not isinstance(mini_batch_size, (int, np.integer)) or mini_batch_size < 1:
            raise ValueError(f"mini_batch_size must be a positive int, got {mini_batch_size!r}")
        if len(self) % mini_batch_size != 0:
            raise ValueError(f"DataProto of size {len(self)} is not divisible by mini_batch_size {mini_batch_size}")
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
            dataset=range(len(self)),
            batch_size=int(mini_batch_size),
            collate_fn=partial(_select_rows, self),
            generator=generator,
            **dataloader_kwargs,
        )

        def get_data():
            for _ in range(epochs):
                for mini_batch in loader:
                    mini_batch.meta_info = self.meta_info
                    yield mini_batch

        return iter(get_data())

    def to(self, device: str | torch.device) -> DataProto:
        """Move the tensor batch to ``device`` (in place) and return ``self``."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    # ----------------------------------------------------------------------------------------- serialisation

    def __getstate__(self) -> dict:
        """Pickle support (Ray transfers, :meth:`save_to_disk`): tensors are encoded with
        :func:`serialize_tensordict`, so a chunk that is a view of a larger batch only ships its own rows."""
        batch = None if self.batch is None else serialize_tensordict(self.batch)
        return {"batch": batch, "non_tensor_batch": self.non_tensor_batch, "meta_info": self.meta_info}

    def __setstate__(self, state: dict) -> None:
        self.batch = None if state["batch"] is None else deserialize_tensordict(state["batch"])
        self.non_tensor_batch = state["non_tensor_batch"]
        self.meta_info = state["meta_info"]

    def save_to_disk(self, filepath: str | os.PathLike) -> None:
        """Pickle this DataProto to ``filepath``."""
        with open(filepath, "wb") as f:
            pickle.dump(self, f)

    @staticmethod
    def load_from_disk(filepath: str | os.PathLike) -> DataProto:
        """Load a DataProto written by :meth:`save_to_disk`.

        Raises:
            TypeError: the file does not contain a DataProto.
        """
        with open(filepath, "rb") as f:
            data = pickle.load(f)
        if not isinstance(data, DataProto):
            raise TypeError(f"{filepath} holds a {type(data).__name__}, not a DataProto")
        return data

    def print_size(self, prefix: str = "") -> None:
        """Log (INFO) the memory held by tensors and non-tensor arrays, in MB."""
        tensor_bytes = 0 if self.batch is None else sum(
            t.numel() * t.element_size() for t in self.batch.values(include_nested=True, leaves_only=True)
        )
        array_bytes = sum(v.nbytes for v in self.non_tensor_batch.values())
        logger.info(
            "%sDataProto size: batch %.3f MB, non_tensor_batch %.3f MB", prefix, tensor_bytes / 1024**2,
            array_bytes / 1024**2,
        )


def _select_rows(data: DataProto, positions: list[int]) -> DataProto:
    """Collate function for :meth:`DataProto.make_iterator`: row positions -> DataProto."""
    return data.select_idxs(np.asarray(positions, dtype=np.int64))


# ---------------------------------------------------------------------------------------------------------------------
# module-level helpers
# ---------------------------------------------------------------------------------------------------------------------


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append rows (cycling from the start, as many times as needed) so that the length divides ``size_divisor``.

    Returns:
        ``(padded, pad_size)``; ``padded is data`` when no padding is needed.

    Raises:
        TypeError: ``data`` is not a DataProto. ValueError: ``size_divisor < 1`` or padding an empty DataProto.
    """
    if not isinstance(data, DataProto):
        raise TypeError(f"expected a DataProto, got {type(data).__name__}")
    if not isinstance(size_divisor, (int, np.integer)) or size_divisor < 1:
        raise ValueError(f"size_divisor must be a positive int, got {size_divisor!r}")
    n = len(data)
    if n % size_divisor == 0:
        if n == 0:
            logger.warning("pad_dataproto_to_divisor: DataProto is empty, nothing to pad")
        return data, 0
    pad_size = int(size_divisor - n % size_divisor)
    padded = DataProto.concat([data, data.select_idxs(np.arange(pad_size) % n)])
    return padded, pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last ``pad_size`` rows (inverse of :func:`pad_dataproto_to_divisor`).

    Raises:
        ValueError: ``pad_size`` negative or larger than ``len(data)``.
    """
    if pad_size < 0 or pad_size > len(data):
        raise ValueError(f"pad_size must be in [0, {len(data)}], got {pad_size}")
    return data[: len(data) - pad_size] if pad_size else data


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
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


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
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


def collate_fn(x: Sequence[DataProtoItem]) -> DataProto:
    """Stack :class:`DataProtoItem` rows into a DataProto (tensors stacked, non-tensors -> object arrays ``(B,)``).

    The result's meta_info is the first item's.

    Raises:
        ValueError: empty input. TypeError: an element is not a DataProtoItem.
    """
    items = list(x)
    if not items:
        raise ValueError("collate_fn needs at least one DataProtoItem")
    for i, item in enumerate(items):
        if not isinstance(item, DataProtoItem):
            raise TypeError(f"collate_fn: element {i} is a {type(item).__name__}, expected DataProtoItem")
    batch = torch.stack([item.batch for item in items]).contiguous() if items[0].batch is not None else None
    columns = list_of_dict_to_dict_of_list([item.non_tensor_batch for item in items])
    non_tensor = {k: as_object_array(v) for k, v in columns.items()}
    return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=items[0].meta_info)


@dataclass(eq=False)
class DataProtoFuture:
    """A DataProto that is still being computed by remote workers.

    Attributes:
        collect_fn: combines the resolved list of DataProtos (typically :meth:`DataProto.concat`).
        futures: list of ``ray.ObjectRef`` each resolving to a DataProto.
        dispatch_fn: optional function applied to the collected DataProto (e.g. picking one chunk).
    """

    collect_fn: Callable[[list[DataProto]], DataProto]
    futures: list
    dispatch_fn: Callable[[DataProto], DataProto] | None = None

    @staticmethod
    def concat(data: list) -> DataProtoFuture:
        """Future of the concatenation of the DataProtos behind ``data`` (a list of ``ray.ObjectRef``)."""
        return DataProtoFuture(collect_fn=DataProto.concat, futures=list(data))

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` futures, the ``i``-th resolving to ``self.get().chunk(chunks)[i]``."""
        return [
            DataProtoFuture(self.collect_fn, self.futures, dispatch_fn=partial(_pick_chunk, i, chunks))
            for i in range(chunks)
        ]

    def get(self) -> DataProto:
        """Block on the futures (``ray.get``), collect and dispatch.

        Raises:
            TypeError: a future did not resolve to a DataProto.
        """
        import ray  # imported lazily: the protocol must not require Ray at import time

        outputs = ray.get(self.futures)
        for i, out in enumerate(outputs):
            if not isinstance(out, DataProto):
                raise TypeError(f"future {i} resolved to {type(out).__name__}, expected DataProto")
        result = self.collect_fn(outputs)
        if self.dispatch_fn is not None:
            result = self.dispatch_fn(result)
        return result


def _pick_chunk(index: int, chunks: int, data: DataProto) -> DataProto:
    return data.chunk(chunks)[index]
