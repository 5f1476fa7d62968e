"""Disk faults of checkpoint saves, by fault injection at the writer (CI runs as root and cannot mount a full or
read-only disk): ENOSPC and EROFS raised where a checkpoint file is written, ``torch.save``'s own error on a full disk
(``unexpected pos``) with the free space reported small, too little free space before a save, and a checkpoint folder
that cannot be written, found before training. Each fails with one ``CheckpointError`` that says what happened,
removes the partial folder and keeps the previous checkpoint."""

from __future__ import annotations

import errno
import re
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from conftest import e2e_overrides
from verl.utils import checkpoint_manifest as cm
from verl.utils import checkpoint_space
from verl.utils.checkpoint_manifest import CheckpointError


def _run(tmp_path: Path, data_dir: Path, steps: int = 2):
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import run_ppo

    overrides = e2e_overrides(tmp_path, data_dir) + [
        "trainer.single_process=true",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=1",
        f"trainer.total_training_steps={steps}",
        "trainer.log_val_generations=0",
        "data.max_response_length=6",
    ]
    return run_ppo(load_default_config(overrides))


def _fail_step_2_writes(monkeypatch, error: Exception):
    """``torch.save`` raises ``error`` for the files of the step-2 checkpoint (the step-1 one is written normally)."""
    real = torch.save

    def save(obj, f, *args, **kwargs):
        if f"{cm.TMP_PREFIX}2." in str(f):
            raise error
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


def _assert_previous_kept(tmp_path: Path):
    root = tmp_path / "ckpt"
    assert [p.name for p in cm.step_dirs(root)] == ["global_step_1"]  # the previous checkpoint, still valid
    assert cm.latest_valid_checkpoint(root) == root / "global_step_1"
    assert not list(root.glob(cm.TMP_PREFIX + "*"))  # the partial folder was removed


@pytest.mark.parametrize(
    "error, message",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "no space left on"),
        (OSError(errno.EROFS, "Read-only file system"), "cannot write to (read-only or no permission)"),
    ],
)
def test_a_write_refused_by_the_disk_is_one_clear_error(tmp_path, small_rlla, monkeypatch, error, message):
    _fail_step_2_writes(monkeypatch, error)
    with pytest.raises(CheckpointError, match=rf"{re.escape(message)} .*ckpt while writing the step-2 checkpoint"):
        _run(tmp_path, small_rlla)
    _assert_previous_kept(tmp_path)


def test_torch_saves_unexpected_pos_on_a_full_disk_is_named_as_one(tmp_path, small_rlla, monkeypatch):
    """A full disk surfaces in torch.save's zip writer as ``unexpected pos``: with the free space below the estimate,
    it is reported as "no space left", not as three chained tracebacks."""
    _fail_step_2_writes(monkeypatch, RuntimeError("[enforce fail at inline_container.cc] unexpected pos 9088 vs 8980"))
    real = shutil.disk_usage
    usage = namedtuple("usage", "total used free")

    def disk_usage(path):
        if cm.step_dirs(Path(path)):  # once step 1 is saved, report the disk as nearly full
            return usage(10 << 30, (10 << 30) - 4096, 4096)
        return real(path)

    state = {"checked": 0}

    def check_free_space(root, needed, step):  # the check before the save passes; the disk fills during it
        state["checked"] += 1

    monkeypatch.setattr(checkpoint_space.shutil, "disk_usage", disk_usage)
    monkeypatch.setattr("verl.trainer.ppo.checkpointing.check_free_space", check_free_space)
    with pytest.raises(CheckpointError, match=r"no space left on .*step-2 checkpoint.*global_step_1 is kept"):
        _run(tmp_path, small_rlla)
    assert state["checked"] == 1  # before step 2's save (the first save's size is not known beforehand)
    _assert_previous_kept(tmp_path)


def test_too_little_free_space_is_refused_before_writing(tmp_path, small_rlla, monkeypatch):
    real = shutil.disk_usage
    usage = namedtuple("usage", "total used free")

    def disk_usage(path):
        if cm.step_dirs(Path(path)):
            return usage(10 << 30, (10 << 30) - 4096, 4096)
        return real(path)

    monkeypatch.setattr(checkpoint_space.shutil, "disk_usage", disk_usage)
    with pytest.raises(CheckpointError, match=r"no space left on .*step-2 checkpoint: 0 MiB free, it needs about"):
        _run(tmp_path, small_rlla)
    _assert_previous_kept(tmp_path)


def test_an_unwritable_checkpoint_folder_is_found_before_training(tmp_path, small_rlla, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(checkpoint_space, "open", read_only, raising=False)  # the probe file's open
    with pytest.raises(CheckpointError, match=r"trainer.default_local_dir=.*ckpt is not writable \(Read-only file"):
        _run(tmp_path, small_rlla)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step ran


def test_estimate_is_the_previous_checkpoint_or_six_times_the_weights(tmp_path):
    previous = tmp_path / "global_step_3"
    (previous / "actor").mkdir(parents=True)
    (previous / "actor" / "model.pt").write_bytes(b"x" * 1000)
    (previous / "data.pt").write_bytes(b"x" * 24)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"x" * 100)
    (model / "config.json").write_text("{}")
    assert checkpoint_space.estimate_bytes(previous, model) == 1024
    assert checkpoint_space.estimate_bytes(None, model) == 600
    assert checkpoint_space.estimate_bytes(None, None) == 0


def test_a_save_error_without_a_disk_word_is_full_only_if_the_disk_could_not_hold_it(tmp_path, monkeypatch):
    """The free-space fallback counts what the partial folder already wrote: an unrelated failure (an OOM, a timeout)
    on a disk that could hold the checkpoint is not reported as "no space left"."""
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checkpoint_space.shutil, "disk_usage", lambda path: usage(1000, 950, 50))
    error = RuntimeError("worker died")
    assert checkpoint_space.disk_fault(error, tmp_path, needed=100, written=0) == "full"
    assert checkpoint_space.disk_fault(error, tmp_path, needed=100, written=60) is None  # 50 free + 60 written
    assert checkpoint_space.disk_fault(OSError(errno.EROFS, "x"), tmp_path, needed=0) == "read-only"
    assert checkpoint_space.disk_fault(RuntimeError("... No space left on device ..."), tmp_path, 0) == "full"
