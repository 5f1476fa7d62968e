"""``trainer.single_process=true`` needs no Ray installed: the GPU machines the project borrows have none, and the GPU
suite's ``train_grpo`` step runs the trainer there this way (issue 24; on 2026-11-27 it failed on ``import ray`` in
``ray_resources`` and in the trainer's worker set-up). Ray is made unimportable in the training process
(``sys.modules["ray"] = None``) and a one-step GRPO run of the tiny model must still finish and log its step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO_ROOT, e2e_overrides

BLOCK_RAY_AND_RUN = (
    "import runpy, sys\n"
    "sys.modules['ray'] = None  # any import of ray now raises ImportError\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def test_a_single_process_run_never_imports_ray(small_rlla, tmp_path):
    overrides = e2e_overrides(tmp_path, small_rlla) + [
        "algorithm.adv_estimator=grpo",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console,jsonl]",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_RAY_AND_RUN, str(REPO_ROOT / "tests/trainer/run_in_process.py"), *overrides],
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "timing_s/step" in r] == [1]
