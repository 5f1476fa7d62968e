"""Resource checks, ResourcePoolManager, Role and @register validation (no worker actors are started)."""

from __future__ import annotations

import pytest

from verl.single_controller.base import Dispatch, Execute, ResourcePool, Worker, register
from verl.single_controller.base.decorator import get_dispatch_info
from verl.single_controller.ray import InsufficientResourcesError, RayResourcePool, check_cluster_resources
from verl.trainer.ppo.ray_resources import ResourcePoolManager, Role


def test_role_values_match_verl():
    assert [(r.name, r.value) for r in Role] == [
        ("Actor", 0),
        ("Rollout", 1),
        ("ActorRollout", 2),
        ("Critic", 3),
        ("RefPolicy", 4),
        ("RewardModel", 5),
        ("ActorRolloutRef", 6),
    ]


def test_register_validation_and_rank_note():
    with pytest.raises(ValueError, match="RANK_ZERO"):
        register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, execute_mode=Execute.RANK_ZERO)
    with pytest.raises(TypeError, match="dispatch_mode"):
        register(dispatch_mode="dp")
    with pytest.raises(TypeError, match="execute_mode"):
        register(execute_mode="all")

    class W(Worker):
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
        def boom(self):
            raise KeyError("x")

    assert get_dispatch_info(W.boom) == {
        "dispatch_mode": Dispatch.DP_COMPUTE_PROTO,
        "execute_mode": Execute.ALL,
        "blocking": False,
    }
    with pytest.raises(KeyError) as info:
        W().boom()
    assert any("rank 0 in" in note and "boom" in note for note in info.value.__notes__)


def test_resource_pool_validation():
    for bad in ([], [0], [1, -2], [1.5]):
        with pytest.raises(ValueError, match="process_on_nodes"):
            ResourcePool(bad)
    assert ResourcePool([2, 3]).local_rank_list() == [0, 1, 0, 1, 2]
    with pytest.raises(ValueError, match="cpus_per_worker"):
        RayResourcePool([1], use_gpu=False, cpus_per_worker=0)


def test_manager_rejects_unknown_pool_and_unmapped_role():
    with pytest.raises(ValueError, match="does not define"):
        ResourcePoolManager({"global_pool": [1]}, {Role.Critic: "other"})
    manager = ResourcePoolManager({"global_pool": [1]}, {Role.ActorRolloutRef: "global_pool"}, use_gpu=False)
    with pytest.raises(KeyError, match="Critic"):
        manager.get_resource_pool(Role.Critic)
    with pytest.raises(RuntimeError, match="create_resource_pool"):
        manager.get_resource_pool(Role.ActorRolloutRef)


def test_insufficient_resources_name_what_is_missing(ray_session):
    with pytest.raises(InsufficientResourcesError, match=r"request 4 GPUs but the cluster has 0 GPUs available"):
        check_cluster_resources({"global_pool": [2, 2]}, use_gpu=True)
    manager = ResourcePoolManager({"global_pool": [3]}, {Role.ActorRolloutRef: "global_pool"}, use_gpu=False)
    with pytest.raises(InsufficientResourcesError, match=r"request 3 CPUs"):
        manager.create_resource_pool()
    with pytest.raises(InsufficientResourcesError, match="needs 2 distinct node"):
        check_cluster_resources({"p": [1, 1]}, use_gpu=False, cpus_per_worker=0.5)


def test_manager_creates_colocatable_pool(ray_session):
    manager = ResourcePoolManager(
        {"global_pool": [2]},
        {Role.ActorRolloutRef: "global_pool", Role.Critic: "global_pool"},
        use_gpu=False,
        cpus_per_worker=0.25,
    )
    manager.create_resource_pool()
    try:
        pool = manager.get_resource_pool(Role.Critic)
        assert pool is manager.get_resource_pool(Role.ActorRolloutRef)
        assert pool.max_colocate_count == 2 and pool.world_size == 2 and len(pool.node_ids) == 1
        assert manager.get_n_gpus() == 2
    finally:
        manager.release()
