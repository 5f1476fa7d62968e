"""The single controller on Ray: resource pools are placement groups, a worker group is one Ray actor per bundle.

- ``RayResourcePool(process_on_nodes=[n0, n1, ...])`` reserves ``n_i`` bundles on the ``i``-th node (one placement
  group per node, ``STRICT_PACK``, distinct nodes). A bundle is one GPU (``use_gpu``) or ``cpus_per_worker`` CPUs,
  which may be fractional so that several workers and the driver share a small machine.
- ``RayWorkerGroup(pool, RayClassWithInitArgs(cls, ...))`` starts one actor of ``cls`` (a ``Worker`` subclass, plain
  or ``ray.remote``-decorated) per bundle with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR`` and ``MASTER_PORT`` set (rank 0's node address and a port free there), and binds the class's
  ``@register``-ed methods onto the group (see ``verl.single_controller.base.decorator``).
- Several worker groups may share a pool (actor and critic on the same GPUs): the pool's ``max_colocate_count`` is how
  many; each actor then asks for ``1 / max_colocate_count`` of its bundle.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import uuid
from typing import Any, Sequence

import ray
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from verl.single_controller.base.decorator import Dispatch, runs_on_rank_zero_only
from verl.single_controller.base.worker import find_free_port
from verl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup, WorkerGroupError

logger = logging.getLogger(__name__)

_EPS = 1e-6
_NODE_ID_LABEL = "ray.io/node-id"
_SUPPORTS_LABEL_SELECTOR = "bundle_label_selector" in inspect.signature(placement_group).parameters


class InsufficientResourcesError(RuntimeError):
    """The Ray cluster cannot host the requested resource pools."""


def _round_down(value: float) -> float:
    """Ray accounts resources in units of 1e-4: round shares down so that they always fit their bundle."""
    return math.floor(value * 1e4 + _EPS) / 1e4


def check_cluster_resources(pools: dict[str, Sequence[int]], use_gpu: bool, cpus_per_worker: float = 1.0) -> None:
    """Check that the connected Ray cluster can host ``pools`` (``{name: process_on_nodes}``) together.

    Every entry of a pool needs its own node with enough total capacity (GPUs, or ``count * cpus_per_worker`` CPUs),
    and the sum over all pools must not exceed what the cluster has available now.

    Raises:
        InsufficientResourcesError: naming the resource, what was requested and what the cluster has.
        RuntimeError: Ray is not initialised.
    """
    if not ray.is_initialized():
        raise RuntimeError("Ray is not initialised: call ray.init(...) before creating resource pools")
    key, unit = ("GPU", 1.0) if use_gpu else ("CPU", float(cpus_per_worker))
    nodes = {n["NodeID"]: float(n.get("Resources", {}).get(key, 0.0)) for n in ray.nodes() if n.get("Alive")}
    requested = sum(sum(counts) for counts in pools.values()) * unit
    available = float(ray.available_resources().get(key, 0.0))
    spec = ", ".join(f"{name!r}: {list(counts)}" for name, counts in pools.items())
    if requested > available + _EPS:
        raise InsufficientResourcesError(
            f"resource pools {{{spec}}} request {requested:g} {key}s but the cluster has {available:g} {key}s "
            f"available ({sum(nodes.values()):g} in total over {len(nodes)} node(s))"
        )
    remaining = dict(nodes)
    for name, counts in pools.items():
        used: set[str] = set()
        for count in sorted(counts, reverse=True):
            need = count * unit
            candidates = [nid for nid, cap in remaining.items() if nid not in used and cap + _EPS >= need]
            if not candidates:
                per_node = sorted(nodes.values(), reverse=True)
                raise InsufficientResourcesError(
                    f"resource pool {name!r} {list(counts)} needs {len(counts)} distinct node(s), one with "
                    f"{need:g} {key}s for an entry of {count} worker(s); the cluster's nodes have "
                    f"{[f'{c:g}' for c in per_node]} {key}s"
                )
            best = max(candidates, key=lambda nid: remaining[nid])
            remaining[best] -= need
            used.add(best)


class RayResourcePool(ResourcePool):
    """Worker slots reserved as Ray placement groups, one per node entry.

    Args:
        process_on_nodes: workers per node, e.g. ``[8, 8]`` for two nodes of 8 GPUs (entries land on distinct nodes).
        use_gpu: one GPU per bundle when True, else ``cpus_per_worker`` CPUs.
        name_prefix: prefix of the placement-group names (random when None).
        max_colocate_count: how many worker groups may share the pool.
        cpus_per_worker: CPUs reserved per bundle (fractions allowed), also with GPUs.
        placement_timeout_s: how long to wait for the cluster to grant the placement groups.

    Raises:
        ValueError: bad counts (see ``ResourcePool``) or a non-positive ``cpus_per_worker``.
    """

    def __init__(
        self,
        process_on_nodes: Sequence[int] | None = None,
        use_gpu: bool = True,
        name_prefix: str | None = None,
        max_colocate_count: int = 1,
        cpus_per_worker: float = 1.0,
        placement_timeout_s: float = 300.0,
    ) -> None:
        super().__init__(process_on_nodes, max_colocate_count)
        if not cpus_per_worker > 0:
            raise ValueError(f"cpus_per_worker must be > 0, got {cpus_per_worker!r}")
        self.use_gpu = bool(use_gpu)
        self.name_prefix = name_prefix or uuid.uuid4().hex[:6]
        self.cpus_per_worker = float(cpus_per_worker)
        self.placement_timeout_s = placement_timeout_s
        self.pgs: list[PlacementGroup] | None = None
        self.node_ids: list[str] = []
        self._groups: list[str] = []

    def _bundle(self) -> dict[str, float]:
        bundle = {"CPU": self.cpus_per_worker}
        if self.use_gpu:
            bundle["GPU"] = 1.0
        return bundle

    def get_placement_groups(self) -> list[PlacementGroup]:
        """The pool's placement groups (created and awaited on the first call), one per node entry.

        Raises:
            InsufficientResourcesError: the cluster cannot host the pool, or did not within ``placement_timeout_s``.
        """
        if self.pgs is not None:
            return self.pgs
        check_cluster_resources({self.name_prefix: self._store}, self.use_gpu, self.cpus_per_worker)
        pgs: list[PlacementGroup] = []
        node_ids: list[str] = []
        try:
            for i, count in enumerate(self._store):
                kwargs = {}
                if node_ids and _SUPPORTS_LABEL_SELECTOR:
                    kwargs["bundle_label_selector"] = [{_NODE_ID_LABEL: f"!in({','.join(node_ids)})"}] * count
                pg = placement_group(
                    [self._bundle()] * count,
                    strategy="STRICT_PACK",
                    name=f"{self.name_prefix}_pg{i}_{uuid.uuid4().hex[:6]}",
                    **kwargs,
                )
                pgs.append(pg)
                try:
                    ray.get(pg.ready(), timeout=self.placement_timeout_s)
                except ray.exceptions.GetTimeoutError as exc:
                    raise InsufficientResourcesError(
                        f"resource pool {self.name_prefix!r}: placement group {i} ({count} x {self._bundle()}) not "
                        f"granted within {self.placement_timeout_s:g}s; available now: {ray.available_resources()}"
                    ) from exc
                node_ids.append(placement_group_table(pg)["bundles_to_node_id"][0])
        except BaseException:
            for pg in pgs:
                remove_placement_group(pg)
            raise
        self.pgs, self.node_ids = pgs, node_ids
        logger.info("resource pool %r: %s workers on nodes %s", self.name_prefix, self._store, node_ids)
        return pgs

    def _attach_group(self, group_name: str) -> None:
        """Account one more worker group on the pool.

        Raises:
            ValueError: the pool already hosts ``max_colocate_count`` groups.
        """
        if len(self._groups) >= self.max_colocate_count:
            raise ValueError(
                f"resource pool {self.name_prefix!r} already hosts {self._groups} (max_colocate_count="
                f"{self.max_colocate_count}); create it with a larger max_colocate_count to add {group_name!r}"
            )
        self._groups.append(group_name)

    def release(self) -> None:
        """Remove the placement groups (Ray kills the actors placed in them)."""
        for pg in self.pgs or []:
            remove_placement_group(pg)
        self.pgs, self.node_ids, self._groups = None, [], []


class RayClassWithInitArgs(ClassWithInitArgs):
    """A worker class (plain or ``ray.remote``-decorated) and its constructor arguments, for a ``RayWorkerGroup``."""

    def __init__(self, cls: type, *args: Any, **kwargs: Any) -> None:
        super().__init__(cls, *args, **kwargs)
        self._options: dict[str, Any] = {}

    def update_options(self, options: dict) -> None:
        """Extra ``actor.options(...)`` (e.g. ``runtime_env``); ``env_vars`` are merged under the group's own."""
        self._options.update(options)

    @property
    def actor_cls(self) -> ray.actor.ActorClass:
        """The class as a Ray actor class."""
        return self.cls if isinstance(self.cls, ray.actor.ActorClass) else ray.remote(self.cls)

    def __call__(
        self,
        placement_group: PlacementGroup,
        placement_group_bundle_idx: int,
        num_cpus: float,
        num_gpus: float = 0.0,
        env_vars: dict[str, str] | None = None,
    ):
        """Start one actor in the given bundle with the given resource share and environment variables."""
        options = dict(self._options)
        runtime_env = dict(options.pop("runtime_env", None) or {})
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **(env_vars or {})}
        options.update(
            runtime_env=runtime_env,
            num_cpus=num_cpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=placement_group_bundle_idx
            ),
        )
        if num_gpus:
            options["num_gpus"] = num_gpus
        return self.actor_cls.options(**options).remote(*self.args, **self.kwargs)


def _node_address_and_port() -> tuple[str, int]:
    """This node's address and a port free on it."""
    return ray.util.get_node_ip_address(), find_free_port()


_node_rendezvous = ray.remote(num_cpus=0, max_calls=1)(_node_address_and_port)


def master_address(node_id: str) -> tuple[str, int]:
    """Rank 0's ``MASTER_ADDR`` / ``MASTER_PORT``: found in this process when ``node_id`` is the driver's node, else
    by a one-off task pinned to that node (``max_calls=1``: its worker process exits afterwards instead of idling in
    Ray's pool with the libraries it imported, ~0.4 GB)."""
    if node_id == ray.get_runtime_context().get_node_id():
        return _node_address_and_port()
    return ray.get(
        _node_rendezvous.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
    )


def _finish_dp_future(pad: int, outputs: list):
    from verl.protocol import DataProto

    return WorkerGroup._unpad(DataProto.concat(outputs), pad)


class RayWorkerGroup(WorkerGroup):
    """One Ray actor per bundle of ``resource_pool``, driven as one object (see the module docstring).

    Args:
        resource_pool: where the workers go (``RayResourcePool``).
        ray_cls_with_init: the worker class and its constructor arguments.
        name_prefix: a name for logs and errors (defaults to the class name plus a random suffix).

    Raises:
        TypeError: wrong argument types. ValueError: the pool is full (see ``max_colocate_count``).
        WorkerGroupError: a worker's constructor failed (names the rank).
    """

    def __init__(
        self, resource_pool: RayResourcePool, ray_cls_with_init: RayClassWithInitArgs, name_prefix: str | None = None
    ) -> None:
        if not isinstance(resource_pool, RayResourcePool):
            raise TypeError(f"resource_pool must be a RayResourcePool, got {type(resource_pool).__name__}")
        if not isinstance(ray_cls_with_init, RayClassWithInitArgs):
            raise TypeError(f"ray_cls_with_init must be a RayClassWithInitArgs, got {type(ray_cls_with_init).__name__}")
        super().__init__(resource_pool)
        cls_name = getattr(ray_cls_with_init.cls, "__name__", "worker").replace("ActorClass(", "").rstrip(")")
        self.name_prefix = name_prefix or f"{cls_name}_{uuid.uuid4().hex[:6]}"
        self.resource_pool = resource_pool
        self.ray_cls_with_init = ray_cls_with_init
        self._workers: list = []
        resource_pool._attach_group(self.name_prefix)
        try:
            self._init_with_resource_pool(resource_pool, ray_cls_with_init)
        except BaseException:
            self.shutdown()
            resource_pool._groups.remove(self.name_prefix)
            raise
        self._bind_worker_method(ray_cls_with_init.cls)

    def _init_with_resource_pool(self, pool: RayResourcePool, cls_with_init: RayClassWithInitArgs) -> None:
        pgs = pool.get_placement_groups()
        master_addr, master_port = master_address(pool.node_ids[0])
        num_cpus = _round_down(pool.cpus_per_worker / pool.max_colocate_count)
        num_gpus = _round_down(1.0 / pool.max_colocate_count) if pool.use_gpu else 0.0
        rank = 0
        for pg, local_world_size in zip(pgs, pool.store):
            for local_rank in range(local_world_size):
                env_vars = {
                    "RANK": str(rank),
                    "WORLD_SIZE": str(self.world_size),
                    "LOCAL_RANK": str(local_rank),
                    "LOCAL_WORLD_SIZE": str(local_world_size),
                    "MASTER_ADDR": master_addr,
                    "MASTER_PORT": str(master_port),
                    "WG_PREFIX": self.name_prefix,
                }
                self._workers.append(
                    cls_with_init(pg, local_rank, num_cpus=num_cpus, num_gpus=num_gpus, env_vars=env_vars)
                )
                rank += 1
        ranks = list(range(self.world_size))
        self._wait("__init__", ranks, [w.__ray_ready__.remote() for w in self._workers])
        logger.info(
            "worker group %r: %d workers, master %s:%s", self.name_prefix, self.world_size, master_addr, master_port
        )

    @property
    def workers(self) -> list:
        """The actor handles in rank order."""
        return list(self._workers)

    def shutdown(self) -> None:
        """Kill the group's actors (the pool's placement groups stay reserved)."""
        for worker in self._workers:
            ray.kill(worker)
        self._workers = []

    # ---------------------------------------------------------------- backend hooks
    def _execute_async(
        self, method_name: str, ranks: list[int], per_rank_args: tuple[list, ...], per_rank_kwargs: dict[str, list]
    ) -> list:
        if not self._workers:
            raise RuntimeError(f"worker group {self.name_prefix!r} has been shut down")
        # An argument shared by several ranks is put into the object store once.
        shared = {}
        for values in (*per_rank_args, *per_rank_kwargs.values()):
            first = values[ranks[0]]
            if (
                len(ranks) > 1
                and not isinstance(first, (int, float, str, bool, type(None)))
                and all(values[r] is first for r in ranks)
                and id(first) not in shared
            ):
                shared[id(first)] = ray.put(first)

        def pick(values: list, rank: int) -> Any:
            return shared.get(id(values[rank]), values[rank])

        return [
            getattr(self._workers[r], method_name).remote(
                *(pick(a, r) for a in per_rank_args), **{k: pick(v, r) for k, v in per_rank_kwargs.items()}
            )
            for r in ranks
        ]

    def _wait(self, method_name: str, ranks: list[int], handles: list) -> list:
        results: list = [None] * len(handles)
        position = {ref: i for i, ref in enumerate(handles)}
        pending = list(handles)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = position[ref]
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    cause = getattr(exc, "cause", None) or exc
                    raise WorkerGroupError(
                        f"worker group {self.name_prefix!r}: rank {ranks[i]} of {self.world_size} failed in "
                        f"{method_name}(): {type(cause).__name__}: {cause}",
                        rank=ranks[i],
                        method_name=method_name,
                    ) from exc
        return results

    def _make_future(self, method_name: str, info: dict, handles: list, pad: int) -> Any:
        from verl.protocol import DataProtoFuture

        if info["dispatch_mode"] is Dispatch.DP_COMPUTE_PROTO:
            return DataProtoFuture(collect_fn=functools.partial(_finish_dp_future, pad), futures=handles)
        return handles[0] if runs_on_rank_zero_only(info) else handles

    # ---------------------------------------------------------------- verl's direct execution helpers
    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        """Start ``method_name`` (registered or not) on every worker with the same arguments; refs in rank order."""
        n = self.world_size
        return self._execute_async(
            method_name, list(range(n)), tuple([a] * n for a in args), {k: [v] * n for k, v in kwargs.items()}
        )

    def execute_all_sync(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        """``execute_all_async`` and wait: the results in rank order (raises ``WorkerGroupError``)."""
        return self._wait(
            method_name, list(range(self.world_size)), self.execute_all_async(method_name, *args, **kwargs)
        )

    def execute_rank_zero_async(self, method_name: str, *args: Any, **kwargs: Any):
        """Start ``method_name`` on rank 0 only; its ref."""
        return getattr(self._workers[0], method_name).remote(*args, **kwargs)

    def execute_rank_zero_sync(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``method_name`` on rank 0 only and return its result (raises ``WorkerGroupError``)."""
        return self._wait(method_name, [0], [self.execute_rank_zero_async(method_name, *args, **kwargs)])[0]
