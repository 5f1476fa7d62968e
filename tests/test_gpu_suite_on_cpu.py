"""``bash benchmarks/gpu_suite.sh --cpu-smoke`` (issue 24): the GPU suite's every step runs at toy sizes on CPU and
writes its JSON and table, so the suite works the day a GPU is lent. Its numbers mean nothing here."""
from __future__ import annotations

import argparse
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


def _suite():
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import gpu_suite

    return gpu_suite


def test_resume_keeps_what_was_measured_and_runs_the_failures_again(tmp_path, monkeypatch):
    """A suite split over device calls (2026-11-27: the first call's placeholders made --resume skip every step)."""
    suite, calls, clock = _suite(), [], [1000.0]
    monkeypatch.setattr(suite, "time", argparse.Namespace(time=lambda: clock[0]))

    def fake(name, result):
        def run(args, tmp, deadline, done=None):  # each step runs out of its time
            calls.append((name, round(deadline - clock[0]), done))
            clock[0] = deadline
            return result(done) if callable(result) else result
        return run

    mfu_first = {"qwen2-0.5b": {"ok": True, "update": {"padded": {"mfu": 0.1}}}, "smollm2-135m": {"ok": False}}
    monkeypatch.setattr(suite, "STEPS", {
        "update_mfu": fake("update_mfu", lambda done: {**done, "smollm2-135m": {"ok": True}} if done else mfu_first),
        "exactness": fake("exactness", {"ok": False}), "train_grpo": fake("train_grpo", {"ok": True, "step_s": 2.0}),
        "async": fake("async", {"ok": False, "skipped": "no Ray"})})
    first = tmp_path / "first.json"
    assert suite.main(["--cpu-smoke", "--budget-s", "100", "--output", str(first)]) == 1
    # the time left is split over the steps still to run in proportion to SHARES (0.5, 0.15, 0.3, 0.05)
    assert [(name, seconds) for name, seconds, _ in calls] == [("update_mfu", 50), ("exactness", 15),
                                                               ("train_grpo", 30), ("async", 5)]
    calls.clear()
    again = tmp_path / "again.json"
    suite.main(["--cpu-smoke", "--resume", str(first), "--output", str(again)])
    # kept: the successful model, train_grpo, the skipped async step; run again: the failed model and exactness
    assert [name for name, _, _ in calls] == ["update_mfu", "exactness"]
    assert calls[0][2] == {"qwen2-0.5b": mfu_first["qwen2-0.5b"]}
    steps = json.loads(again.read_text())["steps"]
    assert steps["train_grpo"] == {"ok": True, "step_s": 2.0} and steps["async"]["skipped"] == "no Ray"
    assert steps["update_mfu"]["qwen2-0.5b"] == mfu_first["qwen2-0.5b"]


def test_update_mfu_shares_its_time_by_model_weight(tmp_path, monkeypatch):
    """One slow model cannot starve the others (2026-11-27: the first took the whole step's time on an H200)."""
    suite, timeouts, clock = _suite(), {}, [1000.0]

    def fake_run_step(name, cmd, timeout_s, env=None):  # each model runs out of its time
        timeouts[name.split("/", 1)[1]] = round(timeout_s, 1)
        clock[0] += timeout_s
        return {"ok": False}

    monkeypatch.setattr(suite, "run_step", fake_run_step)
    monkeypatch.setattr(suite, "time", argparse.Namespace(time=lambda: clock[0]))
    args = argparse.Namespace(cpu_smoke=False)
    out = suite.mfu_runs(args, tmp_path, 1000.0 + 120, done={"qwen2-0.5b": {"ok": True}, "qwen2-0.5b_gc": {}})
    # weights flex 1.5, compiled 1.5, gc 1, smollm2 2 (qwen2-0.5b kept): 120*1.5/6, 90*1.5/4.5, 60*1/3, 40*2/2
    assert timeouts == {"qwen2-0.5b_flex": 30.0, "qwen2-0.5b_compiled": 30.0, "qwen2-0.5b_gc": 20.0,
                        "smollm2-135m": 40.0}
    assert list(out) == ["qwen2-0.5b", "qwen2-0.5b_flex", "qwen2-0.5b_compiled", "qwen2-0.5b_gc", "smollm2-135m"]


def test_figures_are_compared_only_with_results_of_the_same_gpu(tmp_path, monkeypatch):
    suite = _suite()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "gpu_20260101-0000.json").write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3"}))
    (results / "gpu_20260201-0000.json").write_text(json.dumps({"device": "NVIDIA H200"}))
    monkeypatch.setattr(suite, "REPO_ROOT", tmp_path)
    assert suite.previous_result("NVIDIA H100 80GB HBM3").name == "gpu_20260101-0000.json"
    assert suite.previous_result("NVIDIA H200").name == "gpu_20260201-0000.json"
    assert suite.previous_result("NVIDIA A100") is None
