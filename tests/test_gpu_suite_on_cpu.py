"""``bash benchmarks/gpu_suite.sh --cpu-smoke``: the GPU suite's every step runs at toy sizes on CPU and writes its
JSON and table, so the suite works the day a GPU is lent. Its numbers mean nothing here; what must hold here too is
the main job's kill-and-resume check (``benchmarks/resume_check.py``): the run stopped by SIGTERM and resumed equals
the uninterrupted one bit for bit."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT


def test_gpu_suite_cpu_smoke(tmp_path):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHON": sys.executable, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(
        ["bash", "benchmarks/gpu_suite.sh", "--cpu-smoke", "--output", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["cpu_smoke"] is True and result["steps"]["update_mfu"]["qwen2-0.5b"]["ok"]
    main_job = result["steps"]["main_job"]
    assert main_job["ok"] and main_job["bitwise_equal"], main_job
    check = main_job["result"]
    assert (
        check["interrupted"]["returncode"] == 143 and check["resumed_from"] == check["interrupted"]["saved_step"] == 2
    )
    assert check["mismatches"] == [] and check["launch_variables"]["ROUTER_RECIPE"] == "option_a"
    assert check["reference"]["deterministic"]["deterministic_algorithms"] is True  # the worker applied the key
    trl = result["steps"]["trl"]  # TRL is not installed in CI: our half runs, TRL's is recorded as skipped
    assert (
        trl["ok"]
        and trl["ours"]["step_median_s"] > 0
        and trl.get("trl_skipped") == "trl is not importable on this machine"
    )
    update = result["figures"]["update_mfu"]["qwen2-0.5b"]
    assert set(update) == {"padded", "packed", "shared"} and all(0 < v["mfu"] for v in update.values())
    train = result["steps"]["train_grpo"]
    assert train["ok"] and train["step_s"] > 0 and 0.5 < sum(train["phase_share"].values()) <= 1.01
    assert "| update_mfu/qwen2-0.5b/padded/mfu |" in proc.stdout
    assert result["ratio_vs_previous"] == {}  # a smoke run is never compared with committed GPU results
    assert result["steps"]["exactness"]["ok"]  # the FlexAttention file: forward tests here, backward ones skipped
    # a suite split over calls: --resume keeps the steps already written and runs only what is missing
    again = tmp_path / "again.json"
    proc = subprocess.run(
        [
            "bash",
            "benchmarks/gpu_suite.sh",
            "--cpu-smoke",
            "--only",
            "update_mfu,train_grpo",
            "--resume",
            str(out),
            "--output",
            str(again),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
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
    monkeypatch.setattr(
        suite,
        "STEPS",
        {  # four steps
            "update_mfu": fake(
                "update_mfu", lambda done: {**done, "smollm2-135m": {"ok": True}} if done else mfu_first
            ),
            "train_grpo": fake("train_grpo", {"ok": True, "step_s": 2.0}),
            "exactness": fake("exactness", {"ok": False}),
            "async": fake("async", {"ok": False, "skipped": "no Ray"}),
        },
    )
    monkeypatch.setattr(suite, "ray_importable", lambda: True)  # the async step keeps its time
    first = tmp_path / "first.json"
    assert suite.main(["--cpu-smoke", "--budget-s", "100", "--output", str(first)]) == 1
    # each step may use the time left less what RESERVE keeps for the steps after it (0.1, 0.05, 0.04 of 100 s)
    assert [(name, seconds) for name, seconds, _ in calls] == [
        ("update_mfu", 81),
        ("train_grpo", 10),
        ("exactness", 5),
        ("async", 4),
    ]
    calls.clear()
    only_mfu = tmp_path / "only_mfu.json"
    # a step left out of --only keeps its record, failure included: still reported, exit status 1
    assert suite.main(["--cpu-smoke", "--only", "update_mfu", "--resume", str(first), "--output", str(only_mfu)]) == 1
    assert [name for name, _, _ in calls] == ["update_mfu"] and calls[0][2] == mfu_first
    assert json.loads(only_mfu.read_text())["steps"]["exactness"] == {"ok": False}
    calls.clear()
    again = tmp_path / "again.json"
    suite.main(["--cpu-smoke", "--resume", str(first), "--output", str(again)])
    # kept: train_grpo and the skipped async step; run again: update_mfu (for its failed model) and exactness
    assert [name for name, _, _ in calls] == ["update_mfu", "exactness"]
    steps = json.loads(again.read_text())["steps"]
    assert steps["train_grpo"] == {"ok": True, "step_s": 2.0} and steps["async"]["skipped"] == "no Ray"
    assert steps["update_mfu"] == {**mfu_first, "smollm2-135m": {"ok": True}}


def test_resume_refuses_a_run_of_another_device(tmp_path, capsys):
    other = tmp_path / "h100.json"
    other.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "cpu_smoke": False, "steps": {}}))
    with pytest.raises(SystemExit) as err:
        _suite().main(["--cpu-smoke", "--resume", str(other), "--output", str(tmp_path / "out.json")])
    assert err.value.code == 2 and "NVIDIA H100 80GB HBM3" in capsys.readouterr().err


def test_update_mfu_keeps_time_for_the_models_after_it(tmp_path, monkeypatch):
    """One slow model cannot starve the others (2026-11-27: the first took the whole step's time on an H200)."""
    suite, timeouts, clock = _suite(), {}, [1000.0]

    def fake_run_step(name, cmd, timeout_s, env=None):  # each model runs out of its time
        timeouts[name.split("/", 1)[1]] = round(timeout_s, 1)
        clock[0] += timeout_s
        return {"ok": False}

    monkeypatch.setattr(suite, "run_step", fake_run_step)
    monkeypatch.setattr(suite, "time", argparse.Namespace(time=lambda: clock[0]))
    args = argparse.Namespace(cpu_smoke=False)
    out = suite.mfu_runs(args, tmp_path, 1000.0 + 600, done={"qwen2-0.5b": {"ok": True}, "qwen2-0.5b_gc": {}})
    # qwen2-0.5b is kept; each of the 4 others keeps MODEL_RESERVE * 600 = 48 s for each model after it
    assert timeouts == {
        "qwen2-0.5b_flex": 456.0,
        "qwen2-0.5b_compiled": 48.0,
        "qwen2-0.5b_gc": 48.0,
        "smollm2-135m": 48.0,
    }
    assert list(out) == ["qwen2-0.5b", "qwen2-0.5b_flex", "qwen2-0.5b_compiled", "qwen2-0.5b_gc", "smollm2-135m"]


def test_a_timed_out_step_is_killed_with_its_children(tmp_path, monkeypatch):
    """train_grpo.sh runs the trainer under two shells: a timeout must not leave it running on the GPU."""
    suite = _suite()
    monkeypatch.setattr(suite, "MIN_LAUNCH_S", 0.0)
    pid_file = tmp_path / "pid"
    step = suite.run_step("t", ["bash", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], 2.0)
    assert step["ok"] is False and step["tail"].startswith("timed out after 2 s")
    pid = int(pid_file.read_text())
    for _ in range(50):  # SIGKILL is immediate; the orphan is reaped by init shortly after
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the step's child {pid} survived its timeout")
    monkeypatch.setattr(suite, "MIN_LAUNCH_S", 15.0)
    assert suite.run_step("t", ["true"], 5.0)["not_run"].startswith("no time left")  # under MIN_LAUNCH_S: not started


def test_a_metrics_line_cut_short_is_skipped(tmp_path):
    """train_run reads the training metrics with kill_campaign.read_metrics (a killed run's last line may be torn)."""
    _suite()
    from kill_campaign import read_metrics

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "timing_s/step": 2.0}\n{"step": 2, "timing_s/st')
    assert list(read_metrics(tmp_path)[0].values()) == [{"step": 1, "timing_s/step": 2.0}]
    assert read_metrics(tmp_path / "missing")[0] == {}


def test_figures_are_compared_only_with_results_of_the_same_gpu(tmp_path, monkeypatch):
    suite = _suite()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "gpu_20260101-0000.json").write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3"}))
    (results / "gpu_20260201-0000.json").write_text(json.dumps({"device": "NVIDIA H200"}))
    (results / "gpu_20260301-0000.json").write_text(json.dumps({"device": "NVIDIA H200"}))
    monkeypatch.setattr(suite, "REPO_ROOT", tmp_path)  # not a git checkout: every file there counts
    assert suite.previous_result("NVIDIA H100 80GB HBM3").name == "gpu_20260101-0000.json"
    assert suite.previous_result("NVIDIA H200").name == "gpu_20260301-0000.json"
    # the file a run resumes (or writes) is never its own baseline
    assert suite.previous_result("NVIDIA H200", (results / "gpu_20260301-0000.json",)).name == "gpu_20260201-0000.json"
    assert suite.previous_result("NVIDIA A100") is None


def test_a_model_stopped_by_its_time_limit_keeps_what_it_measured(tmp_path, monkeypatch):
    """2026-11-27 on an H100: the 0.5B model printed its three update MFUs and two rollout rates, then ran out of time
    compiling the static-cache rollout; the suite recorded nothing of it. The benchmark now writes its JSON after
    every measurement and the suite keeps those figures as ``partial``."""
    suite = _suite()

    def fake_run_step(name, cmd, timeout_s, env=None):
        path = Path(cmd[cmd.index("--json") + 1])
        if name.endswith(("qwen2-0.5b", "smollm2-135m")):  # two layouts measured, then the time limit / a crash
            path.write_text(
                json.dumps(
                    {
                        "gpu": "H100",
                        "params": 5,
                        "update": {
                            "padded": {"mfu": 0.081, "median_s": 1.02, "max_mem_gib": 31.3, "times_s": [1.0]},
                            "shared": {"mfu": 0.097, "median_s": 0.85, "max_mem_gib": 31.3, "times_s": [0.8]},
                        },
                    }
                )
            )
        if name.endswith("smollm2-135m"):
            return {"ok": False, "returncode": 1, "tail": "CUDA out of memory"}
        return {"ok": False, "returncode": None, "tail": "timed out after 249 s"}

    monkeypatch.setattr(suite, "run_step", fake_run_step)
    out = suite.mfu_runs(argparse.Namespace(cpu_smoke=False), tmp_path, suite.time.time() + 600)
    kept = out["qwen2-0.5b"]
    assert kept["partial"] is True and kept["ok"] is False
    assert kept["update"] == {
        "padded": {"mfu": 0.081, "median_s": 1.02, "max_mem_gib": 31.3},
        "shared": {"mfu": 0.097, "median_s": 0.85, "max_mem_gib": 31.3},
    }
    assert kept["rollout_tokens_per_s"] == {}
    assert "partial" not in out["qwen2-0.5b_gc"]  # nothing measured: a failure
    crashed = out["smollm2-135m"]  # figures kept, but a crash stays a failure
    assert "partial" not in crashed and crashed["update"]["padded"]["mfu"] == 0.081
    steps = {"update_mfu": out}
    assert suite.failures(steps) == [f"update_mfu/{n}" for n in out if n != "qwen2-0.5b"]
    figures = suite.summary(steps, "H100", "x", False, None)["figures"]
    assert figures["update_mfu"]["qwen2-0.5b"]["shared"]["mfu"] == 0.097
