"""``LocalWorkerGroup``: one worker in the driver process, driven with ``RayWorkerGroup``'s call signatures.

Covers every dispatch mode and the non-blocking calls on a toy worker, the errors (wrapped and raw), the constructor's
checks, ``LocalResourcePoolManager``, and ``RayPPOTrainer`` training one step in-process with the real
``ActorRolloutRefWorker`` (what ``tests/trainer/run_in_process.py`` and ``benchmarks/checkpoint_cost.py`` rely on).
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest
import ray
import torch

from conftest import e2e_overrides
from verl.protocol import DataProto, DataProtoFuture
from verl.single_controller.base import ClassWithInitArgs, Dispatch, ResourcePool, Worker, WorkerGroupError, register
from verl.single_controller.local import LocalResourcePoolManager, LocalWorkerGroup


class EchoWorker(Worker):
    """Scales ``x``, reports its place in the world, fails on demand."""

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.scale = scale
        self.env_rank = os.environ.get("RANK")  # what the constructor saw

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"y": data.batch["x"] * self.scale})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def compute_later(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"y": data.batch["x"] + self.scale})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env_info(self, tag: str) -> dict:
        return {"tag": tag, "rank": self.rank, "world_size": self.world_size}

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def whoami(self) -> int:
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail(self) -> None:
        raise ValueError("boom")


def _data(n: int) -> DataProto:
    return DataProto.from_dict({"x": torch.arange(n, dtype=torch.float32)})


def test_dispatch_modes_and_futures():
    group = LocalWorkerGroup(None, ClassWithInitArgs(EchoWorker, scale=3.0), name_prefix="echo")
    assert group.world_size == 1 and group.workers == [group.worker] and group.worker.env_rank == "0"
    assert torch.equal(group.compute(_data(5)).batch["y"], torch.arange(5.0) * 3)  # DataProto in, DataProto out
    assert group.env_info("t") == [{"tag": "t", "rank": 0, "world_size": 1}]  # ONE_TO_ALL: one-element list
    assert group.whoami() == 0  # rank zero: the value alone
    future = group.compute_later(_data(3))
    assert isinstance(future, DataProtoFuture)
    assert torch.equal(future.get().batch["y"], torch.arange(3.0) + 3)  # no Ray needed
    as_input = group.compute_later(_data(3))
    as_input.dispatch_fn = lambda out: DataProto.from_dict({"x": out.batch["y"]})
    assert torch.equal(group.compute(as_input).batch["y"], (torch.arange(3.0) + 3) * 3)  # a future as an argument
    parts = future.chunk(3)
    assert [p.get().batch["y"].tolist() for p in parts] == [[3.0], [4.0], [5.0]]
    assert group.execute_rank_zero_sync("whoami") == 0 and group.execute_all_sync("env_info", "u")[0]["tag"] == "u"
    group.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        group.whoami()


def test_errors_name_rank_and_method_or_propagate_raw():
    group = LocalWorkerGroup(ClassWithInitArgs(EchoWorker))  # the class may come first
    with pytest.raises(WorkerGroupError, match=r"rank 0 of 1 failed in fail\(\): ValueError: boom") as info:
        group.fail()
    assert info.value.rank == 0 and info.value.method_name == "fail" and isinstance(info.value.__cause__, ValueError)
    raw = functools.partial(LocalWorkerGroup, wrap_errors=False)(None, ClassWithInitArgs(EchoWorker))
    with pytest.raises(ValueError, match="boom"):
        raw.fail()


def test_constructor_checks_and_ray_remote_class():
    with pytest.raises(ValueError, match="exactly one worker"):
        LocalWorkerGroup(ResourcePool([2]), ClassWithInitArgs(EchoWorker))
    with pytest.raises(TypeError, match="ClassWithInitArgs"):
        LocalWorkerGroup(ResourcePool([1]), EchoWorker)
    with pytest.raises(TypeError, match="needs a worker class"):
        LocalWorkerGroup(None, ClassWithInitArgs(EchoWorker(), 1.0))
    group = LocalWorkerGroup(ResourcePool([1]), ClassWithInitArgs(ray.remote(EchoWorker), scale=-1.0))
    assert isinstance(group.worker, EchoWorker) and group.compute(_data(2)).batch["y"].tolist() == [0.0, -1.0]


def test_local_resource_pool_manager():
    manager = LocalResourcePoolManager({"actor": "global_pool", "critic": "global_pool", "rm": "rm_pool"})
    with pytest.raises(RuntimeError, match="create_resource_pool"):
        manager.get_resource_pool("actor")
    manager.create_resource_pool()
    pool = manager.get_resource_pool("actor")
    assert pool is manager.get_resource_pool("critic") and pool.world_size == 1 and pool.max_colocate_count == 2
    assert manager.get_resource_pool("unmapped") is pool and manager.get_n_gpus() == 2
    manager.release()
    assert manager.resource_pool_dict == {}


def test_ray_ppo_trainer_trains_one_step_in_process(tmp_path, small_rlla):
    from verl.trainer.main_ppo import build_local_trainer

    trainer = build_local_trainer(
        e2e_overrides(tmp_path, small_rlla)
        + [
            "algorithm.adv_estimator=grpo",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=False",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.logger=[]",
        ]
    )
    try:
        assert isinstance(trainer.actor_rollout_wg, LocalWorkerGroup) and trainer.n_workers == 1
        module = trainer.actor_rollout_wg.worker.actor_module
        before = {k: v.clone() for k, v in module.state_dict().items()}
        trainer.fit()
        assert any(not torch.equal(before[k], v) for k, v in module.state_dict().items())  # updated in this process
    finally:
        trainer.shutdown()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = [r for r in records if r.get("step") == 1 and "timing_s/step" in r]
    assert step and all(f"timing_s/{p}" in step[0] for p in ("gen", "reward", "old_log_prob", "update_actor"))
    assert np.isfinite(step[0]["actor/pg_loss"])
