"""reward-dry-run on the real RLLA test split and on hand-made JSONL files (also: the sandbox, undecodable input)."""

from __future__ import annotations

import io
import json
import sys

import pandas as pd
import pytest

from agent_system.reward.dry_run import DryRunSample, main, score_samples
from verl.utils.reward_score.rlla import RewardSwitches


def run(argv):
    out = io.StringIO()
    rc = main(argv, out=out)
    return rc, out.getvalue()


def test_parquet_ground_truths_score_perfectly(shared_dir, monkeypatch):
    for var in (
        "WITHLENGTH",
        "SCHEDULEREWARD",
        "CORRECTMAX1",
        "MAX1STEP30MAX3",
        "COARSEREWARD",
        "REFINEDREWARD",
        "INTERMEDIATEREWARD",
        "SCHEDULELENGTH",
    ):
        monkeypatch.delenv(var, raising=False)
    path = shared_dir / "data" / "rlla_4k" / "test.parquet"
    frame = pd.read_parquet(path)
    n_tool = int(frame["reward_model"].map(lambda r: "<tool_call>" in r["ground_truth"]).sum())
    rc, text = run(["--parquet", str(path), "--json"])
    assert rc == 0
    payload = json.loads(text)
    stats = payload["stats"]
    assert payload["valid"] == len(frame) == 80 and payload["invalid"] == 0
    assert stats["format"]["min"] == stats["format"]["max"] == 1.0
    # a self-scored GT gets 3 when it has a tool call, 0 otherwise
    assert stats["correctness"]["mean"] == pytest.approx(3.0 * n_tool / len(frame))
    assert stats["score"]["max"] == 4.0 and stats["score"]["min"] == 1.0
    rc, text = run(["--parquet", str(path), "--limit", "5", "--set", "SCHEDULEREWARD=1", "--step", "75"])
    assert rc == 0 and "SCHEDULEREWARD" in text and "samples: 5" in text
    assert "format" in text and " 1.5000" in text  # scheduled format max at step 75


def test_jsonl_with_invalid_rows(tmp_path):
    gt = '<think>t</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n</tool_call>'
    lines = [
        {"response": gt, "ground_truth": gt},
        {"response": gt.replace('"a": 1', '"a": 2'), "ground_truth": gt, "step": 0},
        {"response": gt, "ground_truth": "<think>x</think>\n<tool_call>\n{bad}\n</tool_call>"},
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    rc, text = run(["--jsonl", str(path), "--json"])
    payload = json.loads(text)
    assert rc == 0 and payload["valid"] == 2 and payload["invalid"] == 1
    assert payload["invalid_reasons"][0]["row"] == 2
    assert "InvalidGroundTruthError" in payload["invalid_reasons"][0]["reason"]
    # wrong value: M = 3, S = 1 + 1 + 0 → 6·2/3 − 3 = 1
    assert payload["stats"]["correctness"]["min"] == pytest.approx(1.0)
    assert payload["stats"]["score"]["mean"] == pytest.approx((4.0 + 2.0) / 2)


def test_bad_inputs_fail_cleanly(tmp_path, capsys):
    assert main(["--jsonl", str(tmp_path / "missing.jsonl")]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"response": "x"}\n')
    assert main(["--jsonl", str(bad)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    assert main(["--jsonl", str(bad), "--set", "NOPE=1"]) == 2


def test_score_samples_per_sample_step():
    gt = "<think>t</think>\n<response>r</response>"
    report = score_samples(
        [DryRunSample(0, gt, gt, step=0), DryRunSample(1, gt, gt, step=150)],
        step=999,
        switches=RewardSwitches(schedulereward=True),
    )
    assert [r["format"] for r in report.results] == [2.0, 1.0]


# -------------------- the sandbox: a user's reward runs with its timeout and memory limit (issue 22) -----------------
REWARD_FILE = """
import time
from agent_system.reward import reward_function


@reward_function(timeout_s=2)
def hangs_on_one(messages, ground_truth, **kwargs):
    if messages[-1].text() == "hang":
        while True:
            time.sleep(1)
    return 1.0


@reward_function
def greedy(messages, ground_truth, **kwargs):
    if messages[-1].text() == "allocate":
        block = bytearray(1024 * 1024 * 1024)  # 1 GiB, past --memory-mb 128
        return float(len(block))
    return 1.0
"""


def _rollouts(tmp_path, responses):
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps({"response": r, "ground_truth": "gt"}) + "\n" for r in responses))
    return str(path)


@pytest.fixture
def reward_path(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD_FILE)
    return str(path)


def test_hanging_reward_times_out_with_its_own_timeout(tmp_path, reward_path):
    import time

    lines = _rollouts(tmp_path, ["ok", "hang", "ok"])
    start = time.monotonic()
    rc, text = run(["--jsonl", lines, "--reward-path", reward_path, "--reward-name", "hangs_on_one", "--json"])
    elapsed = time.monotonic() - start
    payload = json.loads(text)
    assert rc == 0 and elapsed < 30, elapsed
    assert payload["valid"] == 2 and payload["invalid"] == 1 and payload["timeouts"] == 1
    assert payload["sandbox"].startswith("process (timeout 2s")  # the reward's @reward_function(timeout_s=2)
    (reason,) = payload["invalid_reasons"]
    assert reason["row"] == 1 and "timed out after 2s" in reason["reason"]

    rc, text = run(
        [
            "--jsonl",
            lines,
            "--reward-path",
            reward_path,
            "--reward-name",
            "hangs_on_one",
            "--timeout-s",
            "1",
            "--num-workers",
            "1",
        ]
    )  # the CLI's timeout wins; text report
    assert rc == 0
    assert "invalid row 1: reward 'hangs_on_one' timed out after 1s" in text
    assert "sandbox: 1 call(s) timed out, 0 crashed" in text and "samples: 3, valid: 2, invalid: 1" in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's memory limit is RLIMIT_AS (Linux)")
def test_reward_over_its_memory_limit_is_reported(tmp_path, reward_path):
    lines = _rollouts(tmp_path, ["ok", "allocate", "ok"])
    rc, text = run(
        ["--jsonl", lines, "--reward-path", reward_path, "--reward-name", "greedy", "--memory-mb", "128", "--json"]
    )
    payload = json.loads(text)
    assert rc == 0 and payload["valid"] == 2 and payload["invalid"] == 1
    (reason,) = payload["invalid_reasons"]
    assert reason["row"] == 1 and "MemoryError" in reason["reason"] and "memory limit" in reason["reason"]
    assert "memory 128 MiB" in payload["sandbox"]


def test_sandbox_options_need_the_process_sandbox(tmp_path, reward_path, capsys):
    lines = _rollouts(tmp_path, ["ok"])
    assert main(["--jsonl", lines, "--timeout-s", "3"]) == 2  # default_compute_score runs in this process
    assert "--timeout-s: only with --reward-path or --reward-name" in capsys.readouterr().err
    assert main(["--jsonl", lines, "--reward-name", "rlla", "--memory-mb", "64"]) == 2
    assert "--memory-mb: only with the process sandbox" in capsys.readouterr().err
    # in-process on request: the same scores, no sandbox
    rc, text = run(
        ["--jsonl", lines, "--reward-path", reward_path, "--reward-name", "greedy", "--sandbox", "none", "--json"]
    )
    payload = json.loads(text)
    assert rc == 0 and payload["valid"] == 1 and payload["sandbox"].startswith("none")


# -------------------- undecodable input: file and line named, exit status 2, no traceback (issue 22) ----------------
GOOD_LINE = b'{"response": "<think>t</think>\\n<response>r</response>", "ground_truth": "<response>r</response>"}\n'


@pytest.mark.parametrize(
    "bad_line, expected",
    [
        (b'{"response": "caf\xff", "ground_truth": "x"}\n', "line 3: not valid UTF-8 (byte 0xff at column 18)"),
        (b'{"response": "x", "ground_truth": }\n', "line 3: not valid JSON: Expecting value (column 35)"),
    ],
)
@pytest.mark.parametrize("cli", ["reward-dry-run", "main_eval"])
def test_clis_name_file_and_line_of_undecodable_input(tmp_path, bad_line, expected, cli):
    import subprocess

    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(GOOD_LINE + b"\n" + bad_line + GOOD_LINE)  # line 2 blank: still counted
    module = "agent_system.reward.dry_run" if cli == "reward-dry-run" else "verl.trainer.main_eval"
    flag = "--jsonl" if cli == "reward-dry-run" else "--generations"
    proc = subprocess.run([sys.executable, "-m", module, flag, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (message,) = proc.stderr.strip().splitlines()
    assert message == f"{cli}: error: file {path}, {expected}"
    assert not (tmp_path / "rollouts.summary.json").exists()
