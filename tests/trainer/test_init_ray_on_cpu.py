"""`init_ray` with no address starts a fresh local Ray whose workers can connect, even when
- a stale `ray_current_cluster` file (left by a crashed `ray start` or test cluster) names a dead cluster: Ray's own
  default would try to join it and reject `num_cpus`;
- `~/.ray/auth_token` exists and `RAY_AUTH_MODE` is unset: Ray would turn token auth on for the cluster while the
  workers ran without it, and every worker would fail to register."""

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
print("TASK", ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=120))
ray.shutdown()
"""


def test_local_start_ignores_stale_cluster_file_and_auth_token():
    with tempfile.TemporaryDirectory(prefix="rst", dir="/tmp") as tmp:
        os.makedirs(os.path.join(tmp, "ray"))
        with open(os.path.join(tmp, "ray", "ray_current_cluster"), "w") as f:
            f.write("127.0.0.1:6553")  # nothing listens there
        os.makedirs(os.path.join(tmp, "home", ".ray"))
        with open(os.path.join(tmp, "home", ".ray", "auth_token"), "w") as f:
            f.write("0" * 64)
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
        env.update(RAY_TMPDIR=tmp, HOME=os.path.join(tmp, "home"))
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CPUS 1.0" in proc.stdout and "TASK 42" in proc.stdout
