"""Backend-independent parts of the single controller: a resource pool's shape, a class with its constructor
arguments, and the worker group that exposes every ``@register``-ed worker method on the driver.

A concrete backend (``verl.single_controller.ray``) supplies how a call is started on a set of ranks and how its
results are awaited; the dispatch / padding / collect logic lives here once.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from verl.single_controller.base.decorator import (
    Dispatch,
    collect_rank_zero,
    get_dispatch_info,
    get_predefined_dispatch_fn,
    runs_on_rank_zero_only,
)

logger = logging.getLogger(__name__)


class WorkerGroupError(RuntimeError):
    """A worker of a group failed while running a method.

    Attributes:
        rank: the failing worker's rank.
        method_name: the method it was running.
    """

    def __init__(self, message: str, rank: int, method_name: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.method_name = method_name


class ResourcePool:
    """How many worker processes run on each node.

    Args:
        process_on_nodes: ``process_on_nodes[i]`` workers on the ``i``-th node (distinct nodes).
        max_colocate_count: how many worker groups may share each worker slot.

    Raises:
        ValueError: an empty list, a non-positive count, or ``max_colocate_count < 1``.
    """

    def __init__(self, process_on_nodes: Sequence[int], max_colocate_count: int = 1) -> None:
        process_on_nodes = list(process_on_nodes or [])
        if not process_on_nodes or any(
            not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in process_on_nodes
        ):
            raise ValueError(f"process_on_nodes must be a non-empty list of positive ints, got {process_on_nodes!r}")
        if not isinstance(max_colocate_count, int) or max_colocate_count < 1:
            raise ValueError(f"max_colocate_count must be a positive int, got {max_colocate_count!r}")
        self._store = process_on_nodes
        self.max_colocate_count = max_colocate_count

    @property
    def store(self) -> list[int]:
        """Workers per node."""
        return list(self._store)

    @property
    def world_size(self) -> int:
        """Total number of worker slots."""
        return sum(self._store)

    def local_world_size_list(self) -> list[int]:
        """For every rank, the number of workers on its node."""
        return [n for n in self._store for _ in range(n)]

    def local_rank_list(self) -> list[int]:
        """For every rank, its index among the workers of its node."""
        return [i for n in self._store for i in range(n)]


class ClassWithInitArgs:
    """A class and the arguments to construct it with, kept until the workers are created."""

    def __init__(self, cls: type, *args: Any, **kwargs: Any) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    def __call__(self) -> Any:
        """Construct the instance locally."""
        return self.cls(*self.args, **self.kwargs)


def _make_group_method(method_name: str, info: dict):
    def method(self, *args, **kwargs):
        return self._call_registered(method_name, info, args, kwargs)

    method.__name__ = method_name
    return method


class WorkerGroup:
    """A set of ``world_size`` workers that the driver addresses as one object.

    Every method of the worker class carrying ``@register`` is bound onto the group under the same name, so the driver
    writes ``wg.update_actor(batch)``. Subclasses implement ``_execute_async`` (start a call on some ranks) and
    ``_wait`` (block for the results), and may override ``_make_future`` for non-blocking calls.
    """

    def __init__(self, resource_pool: ResourcePool | None) -> None:
        self._world_size = resource_pool.world_size if resource_pool is not None else 0
        self._bound_methods: list[str] = []

    @property
    def world_size(self) -> int:
        """Number of workers."""
        return self._world_size

    # ---------------------------------------------------------------- binding
    def _bind_worker_method(self, user_defined_cls: type) -> list[str]:
        """Expose every ``@register``-ed method of ``user_defined_cls`` on this group; returns their names.

        Raises:
            ValueError: a registered method's name clashes with an attribute of the group.
        """
        names = []
        for name in dir(user_defined_cls):
            if name.startswith("__"):
                continue
            try:
                attr = getattr(user_defined_cls, name)
            except AttributeError:
                continue
            info = get_dispatch_info(attr) if callable(attr) else None
            if info is None:
                continue
            if hasattr(self, name) and name not in self._bound_methods:
                raise ValueError(
                    f"registered method {name!r} of {user_defined_cls.__name__} clashes with an "
                    f"attribute of {type(self).__name__}"
                )
            setattr(self, name, _make_group_method(name, info).__get__(self))
            names.append(name)
        self._bound_methods.extend(names)
        logger.debug("bound %s onto %s", names, type(self).__name__)
        return names

    # ---------------------------------------------------------------- calls
    def _call_registered(self, method_name: str, info: dict, args: tuple, kwargs: dict) -> Any:
        """Dispatch, execute and collect one call of a registered method (see ``decorator.Dispatch``)."""
        from verl.protocol import DataProtoFuture

        # A future from a previous non-blocking call is resolved on the driver first.
        args = tuple(a.get() if isinstance(a, DataProtoFuture) else a for a in args)
        kwargs = {k: (v.get() if isinstance(v, DataProtoFuture) else v) for k, v in kwargs.items()}

        mode = info["dispatch_mode"]
        pad = 0
        if mode is Dispatch.DP_COMPUTE_PROTO:
            args, kwargs, pad = self._pad_data_proto_args(method_name, args, kwargs)
        fns = get_predefined_dispatch_fn(mode)
        per_rank_args, per_rank_kwargs = fns["dispatch_fn"](self, *args, **kwargs)
        collect_fn = fns["collect_fn"]
        if runs_on_rank_zero_only(info):
            ranks = [0]
            if isinstance(mode, Dispatch):
                collect_fn = collect_rank_zero
        else:
            ranks = list(range(self.world_size))
        handles = self._execute_async(method_name, ranks, per_rank_args, per_rank_kwargs)

        if not info["blocking"]:
            return self._make_future(method_name, info, handles, pad)
        outputs = self._wait(method_name, ranks, handles)
        return self._unpad(collect_fn(self, outputs), pad)

    def _pad_data_proto_args(self, method_name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict, int]:
        """Pad every DataProto argument to a multiple of the world size; they must all have the same length.

        Raises:
            ValueError: DataProto arguments of different lengths.
        """
        from verl.protocol import DataProto, pad_dataproto_to_divisor

        lengths = {len(v) for v in (*args, *kwargs.values()) if isinstance(v, DataProto)}
        if len(lengths) > 1:
            raise ValueError(f"{method_name}: DataProto arguments have different lengths {sorted(lengths)}")
        if not lengths or next(iter(lengths)) % self.world_size == 0:
            return args, kwargs, 0
        pad = 0

        def padded(value: Any) -> Any:
            nonlocal pad
            if not isinstance(value, DataProto):
                return value
            value, pad = pad_dataproto_to_divisor(value, self.world_size)
            return value

        args = tuple(padded(a) for a in args)
        kwargs = {k: padded(v) for k, v in kwargs.items()}
        logger.debug("%s: padded %d rows to divide world_size=%d", method_name, pad, self.world_size)
        return args, kwargs, pad

    @staticmethod
    def _unpad(output: Any, pad: int) -> Any:
        from verl.protocol import DataProto, unpad_dataproto

        if pad and isinstance(output, DataProto):
            return unpad_dataproto(output, pad)
        return output

    # ---------------------------------------------------------------- backend hooks
    def _execute_async(
        self, method_name: str, ranks: list[int], per_rank_args: tuple[list, ...], per_rank_kwargs: dict[str, list]
    ) -> list:
        """Start ``method_name`` on ``ranks`` (rank ``r`` gets ``per_rank_args[i][r]``); one handle per rank."""
        raise NotImplementedError

    def _wait(self, method_name: str, ranks: list[int], handles: list) -> list:
        """Block until every handle is done; results in the order of ``ranks``. Raises ``WorkerGroupError``."""
        raise NotImplementedError

    def _make_future(self, method_name: str, info: dict, handles: list, pad: int) -> Any:
        """What a non-blocking call returns (``info`` is the method's ``register`` info, ``pad`` the padding rows)."""
        raise NotImplementedError
