"""``bash benchmarks/gpu_suite.sh --cpu-smoke`` (issue 24): the GPU suite's every step runs at toy sizes on CPU and
writes its JSON and table, so the suite works the day a GPU is lent. Its numbers mean nothing here."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO_ROOT


def test_gpu_suite_cpu_smoke(tmp_path):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHON": sys.executable, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(["bash", "benchmarks/gpu_suite.sh", "--cpu-smoke", "--output", str(out)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["cpu_smoke"] is True and result["steps"]["update_mfu"]["qwen2-0.5b"]["ok"]
    update = result["figures"]["update_mfu"]["qwen2-0.5b"]
    assert set(update) == {"padded", "packed", "shared"} and all(0 < v["mfu"] for v in update.values())
    train = result["steps"]["train_grpo"]
    assert train["ok"] and train["step_s"] > 0 and 0.5 < sum(train["phase_share"].values()) <= 1.01
    assert "| update_mfu/qwen2-0.5b/padded/mfu |" in proc.stdout
    assert result["ratio_vs_previous"] == {}  # a smoke run is never compared with committed GPU results
    assert result["steps"]["exactness"]["ok"]  # the FlexAttention file: forward tests here, backward ones skipped
    # a suite split over calls: --resume keeps the steps already written and runs only what is missing
    again = tmp_path / "again.json"
    proc = subprocess.run(["bash", "benchmarks/gpu_suite.sh", "--cpu-smoke", "--only", "update_mfu,train_grpo",
                           "--resume", str(out), "--output", str(again)], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[gpu_suite]" not in proc.stdout  # nothing ran again
    assert json.loads(again.read_text())["steps"] == result["steps"]
