"""Atomic file writes: write to a temporary sibling, then ``os.replace`` it onto the target (atomic on POSIX within
one file system), so a reader never sees a partial file and a crash leaves the previous version in place."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "temp_sibling"]


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
