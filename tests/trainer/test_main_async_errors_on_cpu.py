"""``python -m verl.trainer.main_async`` reports a user's mistake as main_ppo does: one ``error:`` line naming the key
or file, exit status 2, no traceback, before Ray or any model starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

RLLA = ["~async.envs.line_world", "+async.envs.rlla={kind:rlla,fraction:1.0}", "trainer.total_training_steps=1"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["actor_rollout_ref.model.path=tiny"], "error: trainer.total_training_steps must be set"),
        (RLLA + ["data.train_files=/nonexistent.parquet"], "error: data.train_files: file not found: /nonexistent"),
        (RLLA + ["custom_reward_function.path=/nonexistent.py"], "error: custom_reward_function: "),
        (["trainer.total_training_steps=1", "actor_rollout_ref.rollout.n=-1"], "error: actor_rollout_ref.rollout.n"),
        (["trainer.total_training_steps=1", "data.train_batch_size=-5"], "error: data.train_batch_size=-5"),
        (RLLA + ["actor_rollout_ref.model.path=tiny-sft"], "preset not built yet"),
    ],
)
def test_one_error_line_and_status_2(args, message, tmp_path):
    env = {**os.environ, "TOOLRL_CACHE": str(tmp_path / "cache")}  # no SFT preset built there
    done = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_async", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert message in done.stderr.strip().splitlines()[-1]
