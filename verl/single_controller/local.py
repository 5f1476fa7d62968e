"""The single controller without Ray: a worker group that hosts ONE worker inside the driver process.

``LocalWorkerGroup`` has ``RayWorkerGroup``'s constructor and call signatures, so ``RayPPOTrainer`` runs in-process
when given ``ray_worker_group_cls=LocalWorkerGroup`` and a ``LocalResourcePoolManager`` (which creates no placement
groups and needs no Ray cluster). Every ``@register``-ed method of the worker class is bound onto the group and goes
through the same dispatch / collect code as the Ray group (``verl.single_controller.base.worker_group``): a
``DataProto`` in gives a ``DataProto`` out, ``Dispatch.ONE_TO_ALL`` returns a one-element list, rank-zero calls return
the value alone, and a failing worker method raises ``WorkerGroupError`` naming rank 0 and the method.

Uses: benchmarks and profiling without inter-process copies, and debugging the workers with ``pdb``/breakpoints in
the driver. With ``wrap_errors=False`` (``functools.partial(LocalWorkerGroup, wrap_errors=False)``) a worker's
exception propagates unchanged, so a post-mortem lands in the worker's frame.

Differences from the Ray group, all inherent to running in one process:

- the world size is always 1 (a pool with more slots is refused);
- arguments are passed by reference, not serialised: a worker that mutates an input tensor in place mutates the
  caller's tensor (the project's workers do not);
- a non-blocking call has already run when it returns: ``DP_COMPUTE_PROTO`` gives a ``DataProtoFuture`` whose
  ``get()`` needs no Ray, other modes give the results themselves instead of ``ray.ObjectRef`` handles.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from typing import Any, Iterator

from verl.protocol import DataProtoFuture
from verl.single_controller.base.decorator import Dispatch, get_predefined_dispatch_fn, runs_on_rank_zero_only
from verl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup, WorkerGroupError

logger = logging.getLogger(__name__)

_RANK_ENV = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


@contextlib.contextmanager
def _single_rank_env() -> Iterator[None]:
    """Rank 0 of a world of 1 in the environment while the worker is constructed (``Worker`` reads it there)."""
    saved = {key: os.environ.get(key) for key in _RANK_ENV}
    os.environ.update(_RANK_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _plain_class(cls: Any) -> type:
    """The Python class behind ``cls``, which may be a ``ray.remote``-decorated actor class.

    Raises:
        TypeError: ``cls`` is neither a class nor a Ray actor class.
    """
    metadata = getattr(cls, "__ray_metadata__", None)
    if metadata is not None:
        cls = metadata.modified_class
    if not isinstance(cls, type):
        raise TypeError(f"LocalWorkerGroup needs a worker class, got {cls!r}")
    return cls


class _Outcome:
    """The result of a call that already ran: its return value or the exception it raised."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error


class LocalDataProtoFuture(DataProtoFuture):
    """A ``DataProtoFuture`` over calls that already ran in this process: ``get()`` needs no Ray.

    ``futures`` holds the already computed outputs; ``collect_fn`` raises the worker's error, if any.
    """

    def get(self):
        result = self.collect_fn(self.futures)
        return self.dispatch_fn(result) if self.dispatch_fn is not None else result

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` futures, the ``i``-th resolving to ``self.get().chunk(chunks)[i]``."""
        return [
            LocalDataProtoFuture(collect_fn=self.collect_fn, futures=self.futures, dispatch_fn=future.dispatch_fn)
            for future in super().chunk(chunks)
        ]


class LocalWorkerGroup(WorkerGroup):
    """One worker hosted in the driver process, driven like a one-worker ``RayWorkerGroup``.

    Args:
        resource_pool: ignored apart from its size, which must be 1 (``None`` is fine). For convenience the
            worker class may be passed first instead: ``LocalWorkerGroup(ClassWithInitArgs(Worker, ...))``.
        ray_cls_with_init: the worker class (plain or ``ray.remote``-decorated) and its constructor arguments, a
            ``ClassWithInitArgs`` or ``RayClassWithInitArgs``.
        name_prefix: a name for logs and errors (defaults to the class name plus a random suffix).
        wrap_errors: True (the Ray group's behaviour) raises ``WorkerGroupError`` from a worker's exception; False
            lets the exception propagate unchanged (for post-mortem debugging).

    Raises:
        TypeError: no worker class given. ValueError: a resource pool with more than one slot.
    """

    def __init__(
        self,
        resource_pool: ResourcePool | ClassWithInitArgs | None = None,
        ray_cls_with_init: ClassWithInitArgs | None = None,
        name_prefix: str | None = None,
        wrap_errors: bool = True,
    ) -> None:
        if ray_cls_with_init is None and isinstance(resource_pool, ClassWithInitArgs):
            resource_pool, ray_cls_with_init = None, resource_pool
        if not isinstance(ray_cls_with_init, ClassWithInitArgs):
            raise TypeError(f"ray_cls_with_init must be a ClassWithInitArgs, got {type(ray_cls_with_init).__name__}")
        if resource_pool is not None and resource_pool.world_size != 1:
            raise ValueError(
                f"LocalWorkerGroup hosts exactly one worker; the resource pool has "
                f"{resource_pool.world_size} slots (set trainer.nnodes=1 and trainer.n_gpus_per_node<=1)"
            )
        super().__init__(ResourcePool([1]))
        cls = _plain_class(ray_cls_with_init.cls)
        self.name_prefix = name_prefix or f"{cls.__name__}_{uuid.uuid4().hex[:6]}"
        self.wrap_errors = bool(wrap_errors)
        with _single_rank_env():
            self._worker = cls(*ray_cls_with_init.args, **ray_cls_with_init.kwargs)
        self._bind_worker_method(cls)
        logger.info("local worker group %r: one %s in the driver process", self.name_prefix, cls.__name__)

    @property
    def worker(self) -> Any:
        """The hosted worker object itself (for inspection and debugging)."""
        if self._worker is None:
            raise RuntimeError(f"worker group {self.name_prefix!r} has been shut down")
        return self._worker

    @property
    def workers(self) -> list:
        """The hosted worker in a one-element list (``RayWorkerGroup.workers`` holds actor handles)."""
        return [self.worker]

    def shutdown(self) -> None:
        """Drop the worker (its models are freed once nothing else refers to them)."""
        self._worker = None

    # ---------------------------------------------------------------- backend hooks
    def _run(self, method_name: str, args: tuple, kwargs: dict) -> _Outcome:
        method = getattr(self.worker, method_name)
        if not self.wrap_errors:
            return _Outcome(value=method(*args, **kwargs))
        try:
            return _Outcome(value=method(*args, **kwargs))
        except Exception as exc:  # re-raised by _wait / the future, wrapped like the Ray group's errors
            return _Outcome(error=exc)

    def _execute_async(
        self, method_name: str, ranks: list[int], per_rank_args: tuple[list, ...], per_rank_kwargs: dict[str, list]
    ) -> list:
        return [
            self._run(method_name, tuple(a[r] for a in per_rank_args), {k: v[r] for k, v in per_rank_kwargs.items()})
            for r in ranks
        ]

    def _wait(self, method_name: str, ranks: list[int], handles: list) -> list:
        for rank, outcome in zip(ranks, handles):
            if outcome.error is not None:
                cause = outcome.error
                raise WorkerGroupError(
                    f"worker group {self.name_prefix!r}: rank {rank} of {self.world_size} failed in "
                    f"{method_name}(): {type(cause).__name__}: {cause}",
                    rank=rank,
                    method_name=method_name,
                ) from cause
        return [outcome.value for outcome in handles]

    def _make_future(self, method_name: str, info: dict, handles: list, pad: int) -> Any:
        if info["dispatch_mode"] is Dispatch.DP_COMPUTE_PROTO:
            collect_fn = get_predefined_dispatch_fn(info["dispatch_mode"])["collect_fn"]

            def collect(outcomes: list) -> Any:
                return self._unpad(collect_fn(self, self._wait(method_name, [0], outcomes)), pad)

            return LocalDataProtoFuture(collect_fn=collect, futures=handles)
        results = self._wait(method_name, [0], handles)
        return results[0] if runs_on_rank_zero_only(info) else results

    # ---------------------------------------------------------------- verl's direct execution helpers
    def execute_all_sync(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        """Run ``method_name`` (registered or not) on the worker; its result in a one-element list."""
        return self._wait(method_name, [0], [self._run(method_name, args, kwargs)])

    execute_all_async = execute_all_sync

    def execute_rank_zero_sync(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``method_name`` on the worker and return its result."""
        return self.execute_all_sync(method_name, *args, **kwargs)[0]

    execute_rank_zero_async = execute_rank_zero_sync


class LocalResourcePoolManager:
    """``ResourcePoolManager``'s interface for in-process runs: no Ray, every pool is one local slot.

    Pass it as ``RayPPOTrainer(resource_pool_manager=...)`` together with ``ray_worker_group_cls=LocalWorkerGroup``.

    Args:
        mapping: ``{Role: pool name}`` as for ``ResourcePoolManager`` (roles not in it get a pool named
            ``"global_pool"``).
    """

    def __init__(self, mapping: dict | None = None) -> None:
        self.mapping = dict(mapping or {})
        self.resource_pool_dict: dict[str, ResourcePool] = {}

    def create_resource_pool(self) -> None:
        """One single-slot pool per pool name (shared by every role mapped to it)."""
        names = set(self.mapping.values()) | {"global_pool"}
        for name in names:
            n_roles = sum(1 for pool in self.mapping.values() if pool == name)
            self.resource_pool_dict[name] = ResourcePool([1], max_colocate_count=max(1, n_roles))

    def get_resource_pool(self, role: Any) -> ResourcePool:
        """The pool of ``role``.

        Raises:
            RuntimeError: ``create_resource_pool`` has not run.
        """
        if not self.resource_pool_dict:
            raise RuntimeError("call create_resource_pool() before get_resource_pool()")
        return self.resource_pool_dict[self.mapping.get(role, "global_pool")]

    def get_n_gpus(self) -> int:
        """Workers over all pools (one per pool)."""
        return len(self.resource_pool_dict) or 1

    def release(self) -> None:
        """Forget the pools (nothing is reserved)."""
        self.resource_pool_dict.clear()


__all__ = ["LocalDataProtoFuture", "LocalResourcePoolManager", "LocalWorkerGroup"]
