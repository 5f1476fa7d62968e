"""How a worker method is called by its worker group: the dispatch mode (how the driver's arguments are split across
the workers and how their results are gathered) is attached to the method with ``@register``.

verl's names: ``Dispatch.ONE_TO_ALL`` (every worker gets the same arguments; results come back as a list) and
``Dispatch.DP_COMPUTE_PROTO`` (a ``DataProto`` argument is split into ``world_size`` equal chunks, padded to a multiple
of the world size and unpadded after; the workers' ``DataProto`` results are concatenated in rank order).
"""
from __future__ import annotations

import enum
import functools

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


def register(dispatch_mode: Dispatch = Dispatch.ONE_TO_ALL, execute_mode: Execute = Execute.ALL, blocking: bool = True):
    """Mark a worker method as callable from the driver through a worker group.

    Args:
        dispatch_mode: how arguments are split and results gathered (see ``Dispatch``).
        execute_mode: which ranks execute the method.
        blocking: when False the group returns Ray object refs (a ``DataProtoFuture`` for DP calls) instead of values.
    """

    def decorator(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            return fn(*args, **kwargs)

        setattr(inner, MAGIC_ATTR, {"dispatch_mode": dispatch_mode, "execute_mode": execute_mode, "blocking": blocking})
        return inner

    return decorator


def get_dispatch_info(fn) -> dict | None:
    """The ``register`` info of a method, or None when it is not exposed to the driver."""
    return getattr(fn, MAGIC_ATTR, None)
