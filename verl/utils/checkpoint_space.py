"""Disk faults of checkpoint writes, found early and told plainly.

* :func:`check_writable`: before training, the checkpoint folder is created and a probe file written, fsynced and
  removed there, so a read-only or full folder fails at load, not at the first save after a step's work.
* :func:`check_free_space`: before each save after the first, the newest checkpoint's size (the next one's estimate)
  is compared with the free space of the folder's file system (``shutil.disk_usage``). Before the first save the size
  is not known (LoRA adapters, the HF export and the optimizer state vary by orders of magnitude), so only the fault
  handling below applies; :func:`estimate_bytes` then guesses 6 × the model's weight files (float32 weights and Adam's
  two moments of bfloat16 files) for the classification and the message.
* :func:`disk_fault`: a save that failed is classified from its exception chain (an ``OSError`` with ``ENOSPC`` /
  ``EDQUOT`` / ``EROFS`` / ``EACCES`` anywhere in it, or a message saying so, as a worker's traceback text does)
  and from the free space left, since a full disk often surfaces as an unrelated error of the writer (``torch.save``'s
  zip writer reports ``unexpected pos``).

The caller removes the partial folder and keeps the previous checkpoint; the message says which.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Iterable

from verl.utils.checkpoint_manifest import CheckpointError

__all__ = ["check_free_space", "check_writable", "disk_fault", "estimate_bytes", "folder_bytes", "raise_if_disk_fault"]

MiB = 1 << 20
_FULL = (errno.ENOSPC, errno.EDQUOT)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "ENOSPC")
_READ_ONLY_TEXT = ("Read-only file system", "Permission denied", "EROFS")
MARGIN = 1.1  # free space asked for, as a multiple of the estimate


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (0 when it does not exist)."""
    if not folder.exists():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def estimate_bytes(previous: Path | None, model_dir: str | os.PathLike | None) -> int:
    """The size of the next checkpoint: the ``previous`` one's, else 6 × the weight files (``*.safetensors``,
    ``*.bin``, ``*.pt``) of ``model_dir``; 0 when neither is known."""
    if previous is not None and previous.is_dir():
        return folder_bytes(previous)
    if model_dir and Path(model_dir).is_dir():
        weights = [p for ext in ("*.safetensors", "*.bin", "*.pt") for p in Path(model_dir).glob(ext)]
        return 6 * sum(p.stat().st_size for p in weights)
    return 0


def check_writable(folder: str | os.PathLike, key: str = "trainer.default_local_dir") -> None:
    """Create ``folder`` and write, fsync and remove a probe file in it.

    Raises:
        CheckpointError: the folder cannot be created or written (read-only file system, no permission, full
            disk), naming ``key``, the folder and the system's reason.
    """
    path = Path(folder)
    probe = path / f".write_probe.{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as fh:
            fh.write(b"probe")
            fh.flush()
            os.fsync(fh.fileno())
        probe.unlink()
    except OSError as err:
        raise CheckpointError(
            f"{key}={path} is not writable ({err.strerror or err}): checkpoints could not be saved there; "
            "choose another folder"
        ) from None


def check_free_space(root: Path, needed: int, step: int) -> None:
    """Refuse a save of about ``needed`` bytes when ``root``'s file system has less than ``MARGIN`` times that free.

    Raises:
        CheckpointError: "no space left on <root>", with the free space and the estimate.
    """
    if needed <= 0:
        return
    free = shutil.disk_usage(root).free
    if free < MARGIN * needed:
        raise CheckpointError(
            f"no space left on {root} for the step-{step} checkpoint: {free / MiB:.0f} MiB free, it needs about "
            f"{needed / MiB:.0f} MiB; nothing was written and the previous checkpoints are kept. Free space or "
            "set trainer.default_local_dir elsewhere, then run the same command to resume"
        )


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def disk_fault(exc: BaseException, root: Path, needed: int, written: int = 0) -> str | None:
    """``"full"``, ``"read-only"`` or None: what a failed save's exception says about the disk (module docstring);
    without a word of it in the exception, ``"full"`` when the free space plus the ``written`` bytes of the partial
    folder is below the estimate ``needed`` (the disk could not have held the checkpoint)."""
    for err in _chain(exc):
        if isinstance(err, OSError) and err.errno in _FULL:
            return "full"
        if isinstance(err, OSError) and err.errno in _READ_ONLY:
            return "read-only"
        text = str(err)
        if any(t in text for t in _FULL_TEXT):
            return "full"
        if any(t in text for t in _READ_ONLY_TEXT):
            return "read-only"
    try:
        if needed > 0 and shutil.disk_usage(root).free + written < needed:
            return "full"
    except OSError:
        pass
    return None


def raise_if_disk_fault(
    exc: BaseException, tmp: Path, root: Path, needed: int, step: int, previous: Path | None
) -> None:
    """After a failed save into ``tmp``: when :func:`disk_fault` blames the disk, remove ``tmp`` (a partial folder
    would keep filling it) and raise one :class:`CheckpointError` saying what happened and which checkpoint is kept;
    otherwise return (the caller re-raises ``exc``).

    Raises:
        CheckpointError: "no space left on <root> while writing the step-N checkpoint ..." or "cannot write to ...".
    """
    fault = disk_fault(exc, root, needed, folder_bytes(tmp))  # measured before the partial folder goes
    if fault is None:
        return
    shutil.rmtree(tmp, ignore_errors=True)
    where = "no space left on" if fault == "full" else "cannot write to (read-only or no permission)"
    raise CheckpointError(
        f"{where} {root} while writing the step-{step} checkpoint (about {needed / MiB:.0f} MiB); the partial folder "
        f"was removed and {previous or 'no earlier checkpoint'} is kept. Fix the disk or set "
        "trainer.default_local_dir elsewhere, then run the same command to resume"
    ) from exc
