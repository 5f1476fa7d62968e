"""Two simulated Ray nodes (``ray.cluster_utils.Cluster``, 1 CPU each): ``process_on_nodes=[1, 1]`` puts one worker
on each node and a DP call works across them.

The cluster runs in a subprocess (this file is also the script) so that it never meets the test session's Ray.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULT_PREFIX = "MULTINODE_RESULT "


def _run_cluster() -> dict:
    import numpy as np
    import ray
    import ray.cloudpickle
    import torch
    from ray.cluster_utils import Cluster

    from verl.protocol import DataProto
    from verl.single_controller.base import Dispatch, Worker, register
    from verl.single_controller.ray import (
        InsufficientResourcesError,
        RayClassWithInitArgs,
        RayResourcePool,
        RayWorkerGroup,
    )

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    class NodeWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def node_id(self) -> str:
            return ray.get_runtime_context().get_node_id()

        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def square(self, data: DataProto) -> DataProto:
            return DataProto.from_dict({"y": data.batch["x"] ** 2, "rank": torch.full((len(data),), self.rank)})

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def all_reduce(self) -> float:
            import torch.distributed as dist

            self.init_distributed("cpu")
            value = torch.tensor([float(self.rank + 1)])
            dist.all_reduce(value)
            return value.item()

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        result: dict = {"worker_node_ids": sorted(n.node_id for n in nodes)}
        try:
            RayResourcePool([2], use_gpu=False).get_placement_groups()
        except InsufficientResourcesError as exc:
            result["too_big_error"] = str(exc)
        pool = RayResourcePool([1, 1], use_gpu=False, cpus_per_worker=1.0)
        wg = RayWorkerGroup(pool, RayClassWithInitArgs(NodeWorker))
        result["node_ids"] = wg.node_id()
        out = wg.square(
            DataProto.from_dict({"x": torch.arange(5, dtype=torch.float32)}, {"u": np.arange(5).astype(object)})
        )
        result["y"] = out.batch["y"].tolist()
        result["rank"] = out.batch["rank"].tolist()
        result["all_reduce"] = wg.all_reduce()
        return result
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_workers_on_two_nodes():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env["RAY_AUTH_MODE"] = "disabled"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    # the cluster writes its address file under its own RAY_TMPDIR, so a crash here never leaves a
    # /tmp/ray/ray_current_cluster behind for later ray.init() calls to join; a hung run is killed with its raylets
    ray_tmp = tempfile.mkdtemp(prefix="rmn", dir="/tmp")
    env["RAY_TMPDIR"] = ray_tmp
    child = subprocess.Popen(
        [sys.executable, __file__],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        stdout, stderr = child.communicate()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    assert proc.returncode == 0 and lines, f"subprocess failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    assert sorted(result["node_ids"]) == result["worker_node_ids"]  # one worker on each node
    assert result["y"] == [float(i * i) for i in range(5)]
    assert result["rank"] == [0, 0, 0, 1, 1]
    assert result["all_reduce"] == [3.0, 3.0]
    assert "needs 1 distinct node(s), one with 2 CPUs" in result["too_big_error"]


if __name__ == "__main__":
    print(RESULT_PREFIX + json.dumps(_run_cluster()), flush=True)
