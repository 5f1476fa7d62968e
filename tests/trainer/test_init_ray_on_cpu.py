"""`init_ray` with no address starts a fresh local Ray even when a stale `ray_current_cluster` file (left by a crashed
`ray start` or test cluster) names a dead cluster: Ray's own default would try to join it and reject `num_cpus`."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from conftest import REPO_ROOT

SCRIPT = """
import ray
from omegaconf import OmegaConf
from verl.trainer.main_ppo import init_ray
init_ray(OmegaConf.create({"ray_init": {"address": None, "num_cpus": 1}}))
print("CPUS", ray.cluster_resources()["CPU"])
ray.shutdown()
"""


def test_local_start_ignores_stale_cluster_file():
    with tempfile.TemporaryDirectory(prefix="rst", dir="/tmp") as ray_tmp:
        os.makedirs(os.path.join(ray_tmp, "ray"))
        with open(os.path.join(ray_tmp, "ray", "ray_current_cluster"), "w") as f:
            f.write("127.0.0.1:6553")  # nothing listens there
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_TMPDIR=ray_tmp, RAY_AUTH_MODE="disabled")
        proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CPUS 1.0" in proc.stdout
