"""Every command prints a user's mistake as one ``error:`` line naming the file, row or flag, exit status 2, no
traceback: ``verl.router.infer`` (missing, experiment-folder or non-router checkpoint; prompts without a prompt column,
empty, corrupt; a zero batch size), ``main_eval`` (an unreadable or integer ground truth, an empty generations
file) and ``main_generation`` (a missing, corrupt or prompt-less data file). (``main_ppo``: tests/trainer/test_run_errors_on_cpu.py; ``main_async``: tests/trainer/
test_main_async_errors_on_cpu.py; ``validate-data`` and ``reward-dry-run``: their own tests.)"""

from __future__ import annotations

import json

import pandas as pd
import pytest


@pytest.fixture
def inputs(tmp_path):
    prompt = [{"role": "user", "content": "hi"}]
    pd.DataFrame({"prompt": [prompt]}).to_parquet(tmp_path / "ok.parquet")
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "noprompt.parquet")
    pd.DataFrame({"prompt": pd.Series([], dtype=object)}).to_parquet(tmp_path / "empty.parquet")
    (tmp_path / "corrupt.parquet").write_text("x")
    for step in (2, 10):
        (tmp_path / "exp" / f"global_step_{step}").mkdir(parents=True)
    (tmp_path / "plain" / "actor" / "huggingface").mkdir(parents=True)  # a checkpoint without a router head
    return tmp_path


@pytest.mark.parametrize(
    "checkpoint, prompts, extra, message",
    [
        ("missing", "ok", [], "error: --checkpoint {d}/missing: not a directory"),
        ("exp", "ok", [], "error: --checkpoint {d}/exp: this is a folder of checkpoints; give one of them, e.g. the "
         "newest, {d}/exp/global_step_10"),
        ("plain", "ok", [], "was the run trained with router.enable=true?"),
        ("exp", "noprompt", [], "error: {d}/noprompt.parquet:row 0: missing key 'prompt'"),
        ("exp", "empty", [], "error: {d}/empty.parquet: no prompts"),
        ("exp", "corrupt", [], "error: --prompts {d}/corrupt.parquet: not a readable parquet file"),
        ("exp", "ok", ["--batch_size", "0"], "error: --batch_size must be >= 1, got 0"),
    ],
)  # fmt: skip
def test_router_infer_errors_are_one_line(inputs, capsys, checkpoint, prompts, extra, message):
    from verl.router.infer import main

    argv = ["--checkpoint", str(inputs / checkpoint), "--prompts", str(inputs / f"{prompts}.parquet")]
    assert main([*argv, "--output", str(inputs / "out.jsonl"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message.format(d=inputs) in err[-1] and err[-1].startswith("error: ")
    assert not (inputs / "out.jsonl").exists()


@pytest.mark.parametrize(
    "rows, message",
    [
        ([], "main_eval: error: {f}: no generation rows (the file is empty)"),
        ([{"response": "x", "ground_truth": "<tool_call>\n{bad\n</tool_call>", "data_source": "rlla"}],
         "main_eval: error: {f}:1: ground_truth: the <tool_call> block cannot be read"),
        ([{"response": "x", "ground_truth": 5, "data_source": "rlla"}],
         "main_eval: error: {f}:1: ground_truth: expected a string, got int 5"),
    ],
)  # fmt: skip
def test_main_eval_errors_are_one_line(tmp_path, capsys, rows, message):
    from verl.trainer.main_eval import main

    path = tmp_path / "gen.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["--generations", str(path)]) == 2
    assert message.format(f=path) in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "path, message",
    [
        ("{d}/missing.parquet", "error: data.path: {d}/missing.parquet not found"),
        ("{d}/corrupt.parquet", "error: data.path: Could not open Parquet input source '{d}/corrupt.parquet'"),
        ("{d}/noprompt.parquet", "error: data.path: {d}/noprompt.parquet: missing column 'prompt'"),
    ],
)
def test_main_generation_errors_are_one_line(inputs, path, message):
    import os
    import subprocess
    import sys

    from conftest import REPO_ROOT

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_generation",
            f"data.path={path.format(d=inputs)}",
            "model.path=tiny",
            f"data.output_path={inputs}/gen.jsonl",
            f"hydra.run.dir={inputs}/hydra",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert message.format(d=inputs) in done.stderr.strip().splitlines()[-1]
