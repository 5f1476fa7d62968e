"""The single controller on Ray: placement-group resource pools and actor worker groups."""

from verl.single_controller.ray.base import (
    InsufficientResourcesError,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    check_cluster_resources,
)

__all__ = [
    "InsufficientResourcesError",
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "check_cluster_resources",
]
