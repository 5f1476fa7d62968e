"""RayWorkerGroup on a local 2-CPU Ray: dispatch modes, auto padding, errors, futures, gloo, colocation."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import ray
import ray.cloudpickle
import torch

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Execute, Worker, WorkerGroupError, register
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

# Ray workers cannot import this test module by name: ship its classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class ToyWorker(Worker):
    """Doubles ``x``, tags rows with the rank that computed them, and exposes a few other dispatch modes."""

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.scale = scale

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute(self, data: DataProto) -> DataProto:
        n = len(data)
        return DataProto.from_dict(
            tensors={"y": data.batch["x"] * self.scale, "rank": torch.full((n,), self.rank)},
            non_tensors={"uid": data.non_tensor_batch["uid"]},
            meta_info={"metrics": {"rows": n}},
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def compute_async(self, data: DataProto) -> DataProto:
        return self.compute.__wrapped__(self, data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add(self, data: DataProto) -> DataProto:
        data.batch["a"] += self.rank
        return data

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def count_rows(self, data: DataProto) -> int:
        return len(data)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env_info(self, tag: str) -> dict:
        return {
            "tag": tag,
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "master": (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]),
        }

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on(self, bad_rank: int) -> int:
        if self.rank == bad_rank:
            raise ValueError("boom")
        return self.rank

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def whoami(self) -> int:
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def rank_zero_scale(self) -> float:
        return self.scale

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce_rank(self) -> float:
        import torch.distributed as dist

        self.init_distributed("cpu")
        value = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(value)
        return value.item()


def make_data(n: int) -> DataProto:
    return DataProto.from_dict(
        {"x": torch.arange(n, dtype=torch.float32)}, {"uid": np.array([f"u{i}" for i in range(n)], dtype=object)}
    )


@pytest.fixture(scope="module")
def pool(ray_session):
    pool = RayResourcePool(
        process_on_nodes=[2], use_gpu=False, max_colocate_count=2, cpus_per_worker=0.5, name_prefix="toy"
    )
    yield pool
    pool.release()


@pytest.fixture(scope="module")
def wg(pool):
    group = RayWorkerGroup(pool, RayClassWithInitArgs(ToyWorker, scale=3.0), name_prefix="toy_wg")
    yield group
    group.shutdown()


def test_dp_compute_proto_matches_single_process_in_order(wg):
    assert wg.world_size == 2
    data = make_data(7)  # 7 rows on 2 workers: one padding row
    out = wg.compute(data)
    assert len(out) == 7
    torch.testing.assert_close(out.batch["y"], data.batch["x"] * 3.0)
    assert list(out.non_tensor_batch["uid"]) == [f"u{i}" for i in range(7)]
    assert out.batch["rank"].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert out.meta_info["metrics"] == {"rows": [4, 4]}


def test_auto_padding_args_and_kwargs(wg):
    for size in (1, 2, 3, 5, 8, 10):
        data = DataProto.from_dict(
            {"a": torch.zeros(size)}, {"na": np.array([str(i) for i in range(size)], dtype=object)}
        )
        for out in (wg.add(data), wg.add(data=data)):
            assert len(out) == size
            half = (size + 1) // 2
            assert out.batch["a"].tolist() == [0.0] * half + [1.0] * (size - half)
            assert list(out.non_tensor_batch["na"]) == [str(i) for i in range(size)]


def test_dp_non_dataproto_results_are_a_list(wg):
    assert wg.count_rows(make_data(5)) == [3, 3]


def test_dp_rejects_bad_arguments(wg):
    with pytest.raises(TypeError, match="expected DataProto"):
        wg.compute([1, 2, 3])
    with pytest.raises(ValueError, match="different lengths"):
        wg.compute(make_data(3), extra=make_data(4))


def test_one_to_all_and_rank_zero(wg):
    infos = wg.env_info("t")
    assert [i["rank"] for i in infos] == [0, 1]
    assert [i["local_rank"] for i in infos] == [0, 1]
    assert {i["world_size"] for i in infos} == {2}
    assert {i["tag"] for i in infos} == {"t"}
    assert len({i["master"] for i in infos}) == 1 and int(infos[0]["master"][1]) > 0
    assert wg.whoami() == 0
    assert wg.rank_zero_scale() == 3.0
    assert wg.execute_all_sync("fail_on", -1) == [0, 1]


def test_worker_exception_names_rank_and_method(wg):
    with pytest.raises(WorkerGroupError, match=r"rank 1 of 2 failed in fail_on\(\): ValueError: boom") as info:
        wg.fail_on(1)
    assert info.value.rank == 1 and info.value.method_name == "fail_on"
    assert wg.fail_on(-1) == [0, 1]  # the group survives a failed call


def test_non_blocking_returns_future_that_chains(wg):
    data = make_data(5)
    future = wg.compute_async(data)
    assert not isinstance(future, DataProto)
    out = future.get()
    torch.testing.assert_close(out.batch["y"], data.batch["x"] * 3.0)
    assert wg.count_rows(wg.compute_async(data)) == [3, 3]  # a future as input is resolved first


def test_gloo_all_reduce(wg):
    assert wg.all_reduce_rank() == [3.0, 3.0]


def test_two_groups_share_a_pool_and_a_third_is_refused(pool, wg):
    other = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(ToyWorker), scale=-1.0), name_prefix="toy_b")
    try:
        out = other.compute(make_data(4))
        torch.testing.assert_close(out.batch["y"], -torch.arange(4, dtype=torch.float32))
        torch.testing.assert_close(wg.compute(make_data(4)).batch["y"], 3.0 * torch.arange(4, dtype=torch.float32))
        with pytest.raises(ValueError, match="max_colocate_count=2"):
            RayWorkerGroup(pool, RayClassWithInitArgs(ToyWorker), name_prefix="toy_c")
    finally:
        other.shutdown()


def test_master_address_on_the_driver_node_needs_no_task(ray_session):
    from verl.single_controller.ray.base import _node_rendezvous, master_address

    node = ray.get_runtime_context().get_node_id()
    address, port = master_address(node)
    remote_address, remote_port = ray.get(_node_rendezvous.remote())  # the path other nodes take
    assert address == remote_address and 1024 <= port < 65536 and 1024 <= remote_port < 65536
