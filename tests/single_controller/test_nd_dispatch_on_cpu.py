"""``make_nd_compute_dataproto_dispatch_fn``: upstream verl's dispatch over a named mesh, on a hand-made 2 x 2
(data x tensor parallel) layout, its errors, and end to end on a ``LocalWorkerGroup``."""

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.base import ClassWithInitArgs, Worker, register
from verl.single_controller.base.decorator import make_nd_compute_dataproto_dispatch_fn
from verl.single_controller.local import LocalWorkerGroup


class FakeGroup:
    """What the dispatch reads from a worker group: the workers' answers to the two mesh queries."""

    def __init__(self, ranks, collect):
        self.ranks, self.collect, self.queries = ranks, collect, 0

    def _query_dispatch_info(self, mesh_name):
        self.queries += 1
        return list(self.ranks)

    def _query_collect_info(self, mesh_name):
        return list(self.collect)


def _rows(n):
    return DataProto.from_dict({"x": torch.arange(n, dtype=torch.float32)})


def test_tensor_parallel_peers_get_the_same_rows_and_only_collected_ranks_return():
    fns = make_nd_compute_dataproto_dispatch_fn("actor")
    group = FakeGroup(ranks=[0, 0, 1, 1], collect=[True, False, True, False])  # dp 2 x tp 2
    (per_worker,), kwargs = fns["dispatch_fn"](group, _rows(4))
    assert [w.batch["x"].tolist() for w in per_worker] == [[0, 1], [0, 1], [2, 3], [2, 3]] and kwargs == {}
    outputs = [DataProto.from_dict({"y": w.batch["x"] * 10}) for w in per_worker]
    assert fns["collect_fn"](group, outputs).batch["y"].tolist() == [0, 10, 20, 30]
    fns["dispatch_fn"](group, data=_rows(2))
    assert group.queries == 1  # the mesh layout is asked once per group


def test_errors_name_the_mesh():
    fns = make_nd_compute_dataproto_dispatch_fn("critic")
    with pytest.raises(ValueError, match="'critic'.*leave a gap"):
        fns["dispatch_fn"](FakeGroup([0, 2], [True, True]), _rows(4))
    with pytest.raises(ValueError, match="3 rows, not divisible by dp_size=2"):
        fns["dispatch_fn"](FakeGroup([0, 1], [True, True]), _rows(3))
    with pytest.raises(TypeError, match="expected DataProto"):
        fns["dispatch_fn"](FakeGroup([0, 1], [True, True]), [1, 2])


def test_a_worker_registers_its_mesh_once():
    worker = Worker()
    worker._register_dispatch_collect_info("actor", dp_rank=0, is_collect=True)
    worker._register_dispatch_collect_info("actor", dp_rank=0, is_collect=True)  # the same again: fine
    assert worker._query_dispatch_info("actor") == 0 and worker._query_collect_info("actor") is True
    with pytest.raises(ValueError, match="already registered"):
        worker._register_dispatch_collect_info("actor", dp_rank=1, is_collect=True)
    with pytest.raises(KeyError, match="no mesh 'ref'"):
        worker._query_dispatch_info("ref")


class MeshWorker(Worker):
    def __init__(self):
        super().__init__()
        self._register_dispatch_collect_info("actor", dp_rank=self.rank, is_collect=True)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("actor"))
    def double(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"y": data.batch["x"] * 2})


def test_a_registered_method_with_the_nd_dispatch_runs_on_a_worker_group():
    group = LocalWorkerGroup(None, ClassWithInitArgs(MeshWorker), name_prefix="mesh")
    assert group.double(_rows(3)).batch["y"].tolist() == [0, 2, 4]
