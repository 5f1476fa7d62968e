"""Every benchmark script at a toy size (the GPU suite's own steps run in ``test_gpu_suite_on_cpu.py``; the kill
campaign in ``trainer/test_kill_campaign_on_cpu.py``): each must run to the end and write what it measures, so a
benchmark cannot rot unnoticed between the days it is run for real. The numbers mean nothing at these sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO_ROOT

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_AUTH_MODE": "disabled"}


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )


def test_bench_lora(tmp_path):
    out = tmp_path / "lora.json"
    proc = _run(
        "benchmarks/bench_lora.py",
        "--model",
        "tiny",
        "--rank",
        "4",
        "--batch",
        "2",
        "--prompt-length",
        "16",
        "--response-length",
        "8",
        "--steps",
        "1",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert {"full", "lora"} <= set(result["results"]) and result["ratios"]["optimizer_state"] < 1, result


def test_bench_shared_prompt(tmp_path):
    out = tmp_path / "shared.json"
    proc = _run(
        "benchmarks/bench_shared_prompt.py",
        "--model",
        "tiny",
        "--prompts",
        "1",
        "--n",
        "2",
        "--buckets",
        "short",
        "--response-length",
        "8",
        "--micro-batch",
        "2",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(out.read_text())


def test_rlvcr_phase_scripted(tmp_path):
    proc = _run(
        "experiments/scripts/rlvcr_phase_scripted.py",
        "line_world",
        str(tmp_path / "run"),
        "trainer.total_training_steps=1",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert records and any(k.startswith("rlvcr/") for k in records[-1]), proc.stdout[-2000:]


def test_device_kit_check_reports_what_the_gpu_call_would_carry():
    """``--check`` builds nothing (CI has no wheels built): it names what is missing and prints the device call."""
    proc = _run("benchmarks/device_kit.py", "--check", timeout=120)
    assert "device run call:" in proc.stdout and '"carry"' in proc.stdout, proc.stdout + proc.stderr
    call = json.loads(proc.stdout.split("device run call:\n", 1)[1])
    assert call["carry"] == [".whl", ".devcache", "dataset/rlla_4k"] and call["timeout_s"] <= 600
    assert "gpu_suite.sh" in call["command"] and len(call["command"]) <= 2000
    assert proc.returncode == (1 if "missing:" in proc.stderr else 0)


def test_checkpoint_cost():
    proc = _run("benchmarks/checkpoint_cost.py", "--models", "tiny", "--repeat", "1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "tiny" in proc.stdout


def test_matmul_peak():
    proc = _run("benchmarks/matmul_peak.py", "--size", "128", "--seconds", "0.1", timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stdout + proc.stderr
