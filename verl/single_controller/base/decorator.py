"""How a worker method is called by its worker group: the dispatch mode (how the driver's arguments are split across
the workers and how their results are gathered) is attached to the method with ``@register``.

verl's names:

- ``Dispatch.ONE_TO_ALL``: every worker gets the same arguments; the results come back as a list in rank order.
- ``Dispatch.DP_COMPUTE_PROTO``: every argument must be a ``DataProto``; each is padded to a multiple of the world
  size (``pad_dataproto_to_divisor``) and split into ``world_size`` equal chunks, rank ``i`` getting chunk ``i``. The
  workers' ``DataProto`` results are concatenated in rank order and the padding rows dropped; any other results come
  back as a list.
- ``Dispatch.RANK_ZERO``: only rank 0 runs the method, with the arguments as given; its result is returned alone.

A dispatch mode may also be a dict ``{"dispatch_fn": f, "collect_fn": g}`` with the signatures of the functions below
(``f(worker_group, *args, **kwargs) -> (per-rank args, per-rank kwargs)``, ``g(worker_group, outputs) -> result``).
"""

from __future__ import annotations

import enum
import functools
from typing import Any, Callable

MAGIC_ATTR = "_verl_dispatch_info"


class Dispatch(enum.Enum):
    """How the driver's arguments are distributed to the workers of a group."""

    ONE_TO_ALL = "one_to_all"
    DP_COMPUTE_PROTO = "dp_compute_proto"
    RANK_ZERO = "rank_zero"


class Execute(enum.Enum):
    """Which workers run the call."""

    ALL = "all"
    RANK_ZERO = "rank_zero"


def _check_dispatch_mode(dispatch_mode: Any) -> None:
    if isinstance(dispatch_mode, Dispatch):
        return
    if (
        isinstance(dispatch_mode, dict)
        and set(dispatch_mode) == {"dispatch_fn", "collect_fn"}
        and all(callable(f) for f in dispatch_mode.values())
    ):
        return
    raise TypeError(
        f"dispatch_mode must be a Dispatch member or a dict with callable 'dispatch_fn' and 'collect_fn', "
        f"got {dispatch_mode!r}"
    )


def register(
    dispatch_mode: Dispatch | dict = Dispatch.ONE_TO_ALL, execute_mode: Execute = Execute.ALL, blocking: bool = True
):
    """Mark a worker method as callable from the driver through a worker group.

    Args:
        dispatch_mode: how arguments are split and results gathered (see ``Dispatch`` and the module docstring).
        execute_mode: which ranks execute the method (``Execute.RANK_ZERO`` returns rank 0's result alone).
        blocking: when False the group returns without waiting: a ``DataProtoFuture`` for ``DP_COMPUTE_PROTO``, a
            list of ``ray.ObjectRef`` (one per rank) for ``ONE_TO_ALL``, one ``ray.ObjectRef`` for rank-zero calls.

    An exception raised inside the method gets a note naming the worker's rank and the method, so that it is
    identifiable on the driver even when it surfaces through a non-blocking call.

    Raises:
        TypeError: an unknown dispatch or execute mode.
        ValueError: ``DP_COMPUTE_PROTO`` combined with ``Execute.RANK_ZERO`` (the chunks of the other ranks would be
            lost).
    """
    _check_dispatch_mode(dispatch_mode)
    if not isinstance(execute_mode, Execute):
        raise TypeError(f"execute_mode must be an Execute member, got {execute_mode!r}")
    if dispatch_mode is Dispatch.DP_COMPUTE_PROTO and execute_mode is Execute.RANK_ZERO:
        raise ValueError("Dispatch.DP_COMPUTE_PROTO cannot be combined with Execute.RANK_ZERO")

    def decorator(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                rank = getattr(args[0], "rank", "?") if args else "?"
                exc.add_note(f"raised on worker rank {rank} in {fn.__qualname__}")
                raise

        setattr(inner, MAGIC_ATTR, {"dispatch_mode": dispatch_mode, "execute_mode": execute_mode, "blocking": blocking})
        return inner

    return decorator


def get_dispatch_info(fn) -> dict | None:
    """The ``register`` info of a method, or None when it is not exposed to the driver."""
    return getattr(fn, MAGIC_ATTR, None)


# ----------------------------------------------------------------------------------------------- dispatch / collect


def dispatch_one_to_all(worker_group, *args, **kwargs) -> tuple[tuple[list, ...], dict[str, list]]:
    """Every rank gets every argument unchanged: each argument becomes a list of ``world_size`` references to it."""
    n = worker_group.world_size
    return tuple([arg] * n for arg in args), {key: [val] * n for key, val in kwargs.items()}


def collect_all_to_all(worker_group, outputs: list) -> list:
    """The workers' results as a list in rank order."""
    return list(outputs)


def collect_rank_zero(worker_group, outputs: list) -> Any:
    """Rank 0's result alone."""
    return outputs[0]


def dispatch_dp_compute_data_proto(worker_group, *args, **kwargs) -> tuple[tuple[list, ...], dict[str, list]]:
    """Split every ``DataProto`` argument into ``world_size`` equal consecutive chunks (rank ``i`` gets chunk ``i``).

    The group pads the arguments to a multiple of the world size before calling this.

    Raises:
        TypeError: an argument is not a ``DataProto``.
        ValueError: an argument's length is not divisible by the world size.
    """
    from verl.protocol import DataProto

    n = worker_group.world_size

    def split(name: str, value: Any) -> list:
        if not isinstance(value, DataProto):
            raise TypeError(
                f"Dispatch.DP_COMPUTE_PROTO: argument {name} is a {type(value).__name__}, expected DataProto"
            )
        if len(value) % n:
            raise ValueError(
                f"Dispatch.DP_COMPUTE_PROTO: argument {name} has {len(value)} rows, not divisible by world_size={n}"
            )
        return value.chunk(n)

    split_args = tuple(split(f"#{i}", arg) for i, arg in enumerate(args))
    split_kwargs = {key: split(repr(key), val) for key, val in kwargs.items()}
    return split_args, split_kwargs


def collect_dp_compute_data_proto(worker_group, outputs: list) -> Any:
    """Concatenate the workers' ``DataProto`` results in rank order; other results come back as a list."""
    from verl.protocol import DataProto

    if outputs and all(isinstance(out, DataProto) for out in outputs):
        return DataProto.concat(outputs)
    return list(outputs)


_PREDEFINED: dict[Dispatch, dict[str, Callable]] = {
    Dispatch.ONE_TO_ALL: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_all_to_all},
    Dispatch.DP_COMPUTE_PROTO: {
        "dispatch_fn": dispatch_dp_compute_data_proto,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.RANK_ZERO: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_rank_zero},
}


def make_nd_compute_dataproto_dispatch_fn(mesh_name: str) -> dict[str, Callable]:
    """Upstream verl's dispatch over a named device mesh: ``register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn
    ("actor"))``. Each worker says once (``Worker._register_dispatch_collect_info``) which data-parallel rank of the
    mesh it is and whether its output is collected; every ``DataProto`` argument is split into ``dp_size`` equal
    chunks (``dp_size`` = the largest registered rank + 1) and each worker gets its rank's chunk, so the workers of
    one data-parallel group (tensor or pipeline parallel peers) get the same rows; the collected workers' results are
    concatenated in rank order. The project's own workers are data parallel only and register their roles' meshes
    with ``dp_rank = rank``, which makes this the same split as ``Dispatch.DP_COMPUTE_PROTO`` (without its padding).

    The workers' mesh ranks are queried once per group and mesh, then cached on the group.

    Raises (when called):
        KeyError: a worker registered no mesh ``mesh_name``. ValueError: the registered ranks leave a
        data-parallel rank without a worker, or an argument's rows are not divisible by ``dp_size``.
        TypeError: an argument is not a ``DataProto``.
    """

    def mesh_info(worker_group) -> tuple[list[int], list[bool]]:
        cache = worker_group.__dict__.setdefault("_nd_dispatch_info", {})
        if mesh_name not in cache:
            ranks = [int(r) for r in worker_group._query_dispatch_info(mesh_name)]
            collect = [bool(c) for c in worker_group._query_collect_info(mesh_name)]
            if sorted(set(ranks)) != list(range(max(ranks) + 1)):
                raise ValueError(f"mesh {mesh_name!r}: the workers' data-parallel ranks {ranks} leave a gap")
            cache[mesh_name] = (ranks, collect)
        return cache[mesh_name]

    def dispatch_fn(worker_group, *args, **kwargs):
        from verl.protocol import DataProto

        ranks, _ = mesh_info(worker_group)
        dp_size = max(ranks) + 1

        def split(name: str, value: Any) -> list:
            if not isinstance(value, DataProto):
                raise TypeError(f"mesh {mesh_name!r}: argument {name} is a {type(value).__name__}, expected DataProto")
            if len(value) % dp_size:
                raise ValueError(
                    f"mesh {mesh_name!r}: argument {name} has {len(value)} rows, not divisible by dp_size={dp_size}"
                )
            chunks = value.chunk(dp_size)
            return [chunks[r] for r in ranks]

        return (tuple(split(f"#{i}", a) for i, a in enumerate(args)), {k: split(repr(k), v) for k, v in kwargs.items()})

    def collect_fn(worker_group, outputs: list) -> Any:
        _, collect = mesh_info(worker_group)
        return collect_dp_compute_data_proto(worker_group, [out for out, keep in zip(outputs, collect) if keep])

    return {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}


def get_predefined_dispatch_fn(dispatch_mode: Dispatch | dict) -> dict[str, Callable]:
    """``{"dispatch_fn", "collect_fn"}`` for a dispatch mode (a custom dict is returned as is).

    Raises:
        TypeError: an unknown dispatch mode.
    """
    _check_dispatch_mode(dispatch_mode)
    if isinstance(dispatch_mode, dict):
        return dispatch_mode
    return _PREDEFINED[dispatch_mode]


def runs_on_rank_zero_only(info: dict) -> bool:
    """True when a registered method executes on rank 0 alone (``Dispatch.RANK_ZERO`` or ``Execute.RANK_ZERO``)."""
    return info["dispatch_mode"] is Dispatch.RANK_ZERO or info["execute_mode"] is Execute.RANK_ZERO
