"""One run per experiment folder: an advisory lock that a second run into the same folders is refused by.

A run holds ``fcntl.flock`` on ``<folder>/.run.lock`` for each of its folders (the checkpoint folder
``trainer.default_local_dir`` and the run folder holding ``metrics.jsonl``) from its start to its end. The kernel
drops the lock when the process ends in any way (``kill -9`` included), so a killed run does not leave a folder stuck:
the same command resumes. The file keeps the holder's pid, host, start time and command line, which the refusal of a
second run names. Processes started with ``exec`` do not inherit the lock (the descriptor is close-on-exec); a child
*forked* by the run (a data-loader worker) shares it while it lives.

Advisory locks need a local or lock-aware file system; on one without ``flock`` support (``ENOLCK``, ``ENOSYS``,
``EOPNOTSUPP``) the lock is not enforced, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

__all__ = ["LOCK_NAME", "FolderInUseError", "hold_folders"]

LOCK_NAME = ".run.lock"
_UNSUPPORTED = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)
logger = logging.getLogger(__name__)


class FolderInUseError(RuntimeError):
    """Another live run holds the folder (the message names the config key, the folder and the holder)."""


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another process"
    return (
        f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}: "
        f"{' '.join(info.get('argv', []))[:200]}"
    )


def _acquire(folder: Path, key: str) -> int | None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderInUseError(
            f"{key}={folder} is in use by another run ({_holder(path)}); one run per experiment folder: wait for "
            "it or stop it (the same command then resumes), or set another trainer.experiment_name"
        ) from None
    except OSError as err:  # a file system without flock (NFS without lockd, Lustre without -o flock)
        os.close(fd)
        if err.errno in _UNSUPPORTED:
            logger.warning(
                "%s=%s: the file system does not support flock (%s): one run per folder is not enforced",
                key,
                folder,
                err.strerror,
            )
            return None
        raise
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "argv": sys.argv,
    }
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(record).encode())
    except OSError:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def hold_folders(folders: Sequence[tuple[str, str | os.PathLike]]) -> Iterator[None]:
    """Hold the lock of every ``(config key, folder)`` (created if missing; a folder named twice is locked once) for
    the ``with`` block.

    Raises:
        FolderInUseError: a folder is held by another live run (the locks taken so far are released).
    """
    fds: list[int] = []
    seen: set[Path] = set()
    try:
        for key, folder in folders:
            path = Path(folder).expanduser().resolve()
            if path in seen:
                continue
            seen.add(path)
            fd = _acquire(path, key)
            if fd is not None:
                fds.append(fd)
        yield
    finally:
        for fd in fds:
            os.close(fd)  # closing the descriptor releases its flock
