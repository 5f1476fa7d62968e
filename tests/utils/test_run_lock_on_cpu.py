"""One run per experiment folder (verl/utils/run_lock.py): a second run into held folders is refused at once, naming the
holder; a killed holder (kill -9) leaves nothing stuck; main_ppo refuses a second run with one ``error:`` line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO_ROOT
from verl.utils.run_lock import LOCK_NAME, FolderInUseError, hold_folders

HOLDER = textwrap.dedent(
    """
    import sys, time
    from verl.utils.run_lock import hold_folders
    with hold_folders([("trainer.default_local_dir", sys.argv[1])]):
        print("held", flush=True)
        time.sleep(120)
    """
)


def _holder(folder):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_folder_is_refused_naming_the_holder_and_a_killed_holder_frees_it(tmp_path):
    folder = tmp_path / "ckpt"
    holder = _holder(folder)
    try:
        refused = pytest.raises(
            FolderInUseError, match=rf"trainer.default_local_dir=.*ckpt is in use.*pid {holder.pid}"
        )
        with refused, hold_folders([("trainer.default_local_dir", folder)]):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)  # no cleanup: the kernel drops the lock
        holder.wait()
    assert (folder / LOCK_NAME).is_file()  # the file stays; its lock does not
    both = hold_folders([("trainer.default_local_dir", folder), ("trainer.run_dir", folder)])  # named twice: once
    with both, pytest.raises(FolderInUseError), hold_folders([("trainer.run_dir", folder)]):  # held by this run now
        pass
    with hold_folders([("trainer.run_dir", folder)]):  # released at the end of the block
        pass


def test_main_ppo_refuses_a_second_run_into_the_same_folder(tmp_path):
    folder = tmp_path / "ckpt"
    holder = _holder(folder)
    try:
        start = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "verl.trainer.main_ppo",
                "actor_rollout_ref.model.path=tiny",
                f"trainer.default_local_dir={folder}",
                f"trainer.run_dir={tmp_path}/run",
                "trainer.total_training_steps=1",
                "trainer.save_freq=1",  # a run that saves checkpoints holds their folder
                f"hydra.run.dir={tmp_path}/hydra",
            ],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: trainer.default_local_dir=") and f"pid {holder.pid}" in last
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before anything was written
    assert time.monotonic() - start < 240


def test_a_file_system_without_flock_runs_unlocked_with_a_warning(tmp_path, monkeypatch, caplog):
    import errno
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with caplog.at_level("WARNING"), hold_folders([("trainer.default_local_dir", tmp_path / "nfs")]):
        pass
    assert "does not support flock" in caplog.text and "not enforced" in caplog.text
