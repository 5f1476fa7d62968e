"""Atomic file and folder writes: write to a temporary sibling, then ``os.replace`` it onto the target (atomic on POSIX
within one file system), so a reader never sees a partial file or folder and a crash leaves the previous version in
place."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["atomic_path", "publish_dir", "temp_sibling"]


def temp_sibling(path: str | os.PathLike) -> Path:
    """A hidden temporary name beside ``path`` (``.NAME.tmp-PID``, same folder so the rename stays on one file
    system); the folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Context: yields a temporary sibling of ``path`` to write; on a clean exit it replaces ``path``. The temporary
    file never outlives the block (also when the block raises, which leaves ``path`` untouched)."""
    tmp = temp_sibling(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def publish_dir(build_fn: Callable[[Path], None], target: Path) -> Path:
    """Build into a temporary sibling directory with ``build_fn(tmp_dir)`` and rename it to ``target``.

    A crash half-way never leaves a partial folder that later runs would load (a model preset, a generated task).
    Returns ``target``; an existing ``target`` is returned as is, unbuilt.
    """
    if target.is_dir():  # published by an atomic rename: its existence means it is complete
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build_fn(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process published it first
            if not target.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
