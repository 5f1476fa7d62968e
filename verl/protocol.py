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
The internals (field checks, concatenation, index normalisation, padding helpers, ``DataProtoFuture``) live in
:mod:`verl.utils.dataproto_ops` and are re-exported here with upstream's names.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.utils.dataproto_ops import (
    DataProtoConfig,
    DataProtoFuture,
    check_present,
    key_subset,
    log_size,
    rename_batch_keys,
    row_positions,
    split_single_dict,
    check_fields,
    common_batch_size,
    concat_fields,
    fold_batch_dim,
    mini_batch_iterator,
    pad_dataproto_to_divisor,
    to_non_tensor_array,
    unfold_batch_dim,
    unfold_columns,
    unpad_dataproto,
)
from verl.utils.tensordict_utils import (
    DataProtoError,
    as_object_array,
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
    "DataProtoConfig",
    "DataProtoError",
    "DataProtoFuture",
    "DataProtoItem",
    "collate_fn",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "fold_batch_dim",
    "list_of_dict_to_dict_of_list",
    "pad_dataproto_to_divisor",
    "serialize_single_tensor",
    "serialize_tensordict",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "union_two_dict",
    "unpad_dataproto",
]


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
        check_fields(self.batch, self.non_tensor_batch, self.meta_info)

    # ----------------------------------------------------------------------------------------------- constructors

    @classmethod
    def from_single_dict(
        cls, data: dict[str, torch.Tensor | np.ndarray], meta_info: dict | None = None, auto_padding: bool = False
    ) -> DataProto:
        """Split ``data`` into tensors (-> ``batch``) and ndarrays (-> ``non_tensor_batch``).

        Raises:
            TypeError: a value is neither a ``torch.Tensor`` nor an ``np.ndarray`` (the message names the key).
        """
        tensors, non_tensors = split_single_dict(data)
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

        batch_size = common_batch_size(tensors, num_batch_dims)
        non_tensors = {key: to_non_tensor_array(key, val) for key, val in non_tensors.items()}
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
        idx_np = row_positions(idxs, len(self))
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
        non_tensor = key_subset(self.non_tensor_batch, non_tensor_batch_keys, "non_tensor_batch")
        meta = key_subset(self.meta_info, meta_info_keys, "meta_info")
        if deepcopy:
            batch = batch.clone() if batch is not None else None
            non_tensor, meta = copy.deepcopy(non_tensor), copy.deepcopy(meta)
        elif batch is self.batch and batch is not None:
            batch = batch.select(*batch.keys())  # new container, same tensors
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

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
        meta_info_keys, nt = list(meta_info_keys or []), self.non_tensor_batch
        available = set(self.batch.keys()) if self.batch is not None else set()
        wanted = (batch_keys, available, "batch"), (non_tensor_batch_keys, nt, "non_tensor_batch")
        check_present((*wanted, (meta_info_keys, self.meta_info, "meta_info")))
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
        rename_batch_keys(self.batch, old_keys, new_keys)
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
        batch, non_tensor, meta = concat_fields(data)
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
        return unfold_columns(self, n_split, split_keys)

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
        return mini_batch_iterator(self, mini_batch_size, epochs, seed, dataloader_kwargs)

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
        log_size(self, prefix)


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
