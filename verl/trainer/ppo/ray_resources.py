"""Which worker roles exist and on which resource pool each one runs (verl's ``Role`` and ``ResourcePoolManager``).

``resource_pool_spec = {"global_pool": [n_gpus_per_node] * nnodes}`` with ``mapping = {Role.ActorRolloutRef:
"global_pool", Role.Critic: "global_pool"}`` puts the actor and the critic on the same workers' slots: a pool hosts
one worker group per role mapped to it (its ``max_colocate_count``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Ray is imported where pools are created: a single-process run needs no Ray installed
    from verl.single_controller.ray.base import RayResourcePool

logger = logging.getLogger(__name__)


class Role(Enum):
    """The worker roles of the PPO trainer (verl's values)."""

    Actor = 0
    Rollout = 1
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4
    RewardModel = 5
    ActorRolloutRef = 6


@dataclass
class ResourcePoolManager:
    """Creates the named resource pools and hands each role its pool.

    Args:
        resource_pool_spec: ``{pool name: process_on_nodes}``.
        mapping: ``{Role: pool name}``.
        use_gpu: one GPU per worker when True, else ``cpus_per_worker`` CPUs.
        cpus_per_worker: CPUs reserved per worker (fractions allowed).
        max_colocate_count: worker groups per pool; None means the number of roles mapped to the pool.

    Raises:
        ValueError: a mapping names a pool that the spec lacks, or a role is not a ``Role``.
    """

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Role, str]
    use_gpu: bool = True
    cpus_per_worker: float = 1.0
    max_colocate_count: int | None = None
    resource_pool_dict: dict[str, "RayResourcePool"] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for role, pool in self.mapping.items():
            if not isinstance(role, Role):
                raise ValueError(f"mapping keys must be Role members, got {role!r}")
            if pool not in self.resource_pool_spec:
                raise ValueError(
                    f"{role} is mapped to pool {pool!r}, which resource_pool_spec "
                    f"{sorted(self.resource_pool_spec)} does not define"
                )

    def create_resource_pool(self) -> None:
        """Check that the connected Ray cluster has the resources, then create every pool's placement groups.

        Raises:
            InsufficientResourcesError: GPUs/CPUs requested vs available, or no node fits a pool entry.
        """
        from verl.single_controller.ray.base import RayResourcePool, check_cluster_resources

        check_cluster_resources(self.resource_pool_spec, self.use_gpu, self.cpus_per_worker)
        for name, process_on_nodes in self.resource_pool_spec.items():
            n_roles = sum(1 for pool in self.mapping.values() if pool == name)
            pool = RayResourcePool(
                process_on_nodes=process_on_nodes,
                use_gpu=self.use_gpu,
                name_prefix=name,
                max_colocate_count=self.max_colocate_count or max(1, n_roles),
                cpus_per_worker=self.cpus_per_worker,
            )
            pool.get_placement_groups()
            self.resource_pool_dict[name] = pool
            logger.info(
                "resource pool %r: %s (%s), max_colocate_count=%d",
                name,
                process_on_nodes,
                "GPU" if self.use_gpu else f"{self.cpus_per_worker:g} CPU/worker",
                pool.max_colocate_count,
            )

    def get_resource_pool(self, role: Role) -> "RayResourcePool":
        """The pool of ``role``.

        Raises:
            KeyError: the role is not mapped. RuntimeError: ``create_resource_pool`` has not run.
        """
        if role not in self.mapping:
            raise KeyError(f"{role} is not mapped to a resource pool (mapped: {[r.name for r in self.mapping]})")
        name = self.mapping[role]
        if name not in self.resource_pool_dict:
            raise RuntimeError("call create_resource_pool() before get_resource_pool()")
        return self.resource_pool_dict[name]

    def get_n_gpus(self) -> int:
        """Workers (GPUs when ``use_gpu``) over all pools."""
        return sum(sum(counts) for counts in self.resource_pool_spec.values())

    def release(self) -> None:
        """Remove every pool's placement groups."""
        for pool in self.resource_pool_dict.values():
            pool.release()
        self.resource_pool_dict.clear()
