"""Append-only, crash-safe JSON-lines log, and the replay buffer's record format on it.

Design: ``docs/async.md``, sections "Rollout log" and "Checkpoints and resume" (rollouts go to disk append-only and
crash-safe; after a learner restart the log is reloaded and nothing already written is lost).

Durability rule: :meth:`RolloutLog.append` writes all its records with one ``write``, then ``flush`` and (with
``fsync=True``, the default) ``os.fsync``, and returns only then; a caller acknowledges a record only after
``append`` returned, so every acknowledged record is complete on disk. A crash can leave at most one unterminated
last line, which was never acknowledged: :meth:`RolloutLog.repair` cuts it off (with a warning) before the file is
appended to again, so a new record never glues onto a torn one. A line that does not parse as a JSON object is
skipped with a warning by :meth:`RolloutLog.read`; nothing here raises on bad content.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Set, Tuple

from verl.async_rl.types import _is_int

logger = logging.getLogger(__name__)

__all__ = ["LogScan", "RolloutLog", "consumed_record", "reload_record", "rollout_record", "scan_replay_log"]


class RolloutLog:
    """One JSONL file of dict records.

    Args: ``path`` (parent folders are created); ``fsync``: fsync after every append (False: flush only, which
    survives a process crash but not a machine crash).
    Attributes: ``corrupt_lines`` (skipped by the latest :meth:`read`), ``torn_bytes`` (cut off by the latest
    :meth:`repair`; the constructor repairs once).
    """

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        self.fsync = bool(fsync)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.corrupt_lines = 0
        self.torn_bytes = 0
        self._fh = None
        self.open()

    def open(self) -> None:
        """Repair the tail (:meth:`repair`) and open the file for appending (no-op when open)."""
        if self._fh is not None:
            return
        self.torn_bytes = self.repair()
        created = not self.path.exists()
        self._fh = open(self.path, "ab")
        if created and self.fsync:
            try:  # make the new file's directory entry durable too (POSIX)
                dir_fd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            except OSError:
                pass

    def close(self) -> None:
        """Close the append handle (idempotent)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    @property
    def closed(self) -> bool:
        return self._fh is None

    def repair(self) -> int:
        """Cut an unterminated last line off the file; returns the bytes removed (0 when the file ends in a newline,
        is empty or does not exist)."""
        if not self.path.exists():
            return 0
        with open(self.path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return 0
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return 0
            keep, pos = 0, size
            while pos > 0:  # scan backwards for the last newline
                start = max(0, pos - 65536)
                f.seek(start)
                idx = f.read(pos - start).rfind(b"\n")
                if idx >= 0:
                    keep = start + idx + 1
                    break
                pos = start
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
        logger.warning("log %s: cut off a torn last line (%d bytes, never acknowledged)", self.path, size - keep)
        return size - keep

    def append(self, records: Iterable[Dict[str, Any]]) -> int:
        """Write ``records`` as JSON lines in one write, flush, fsync. Returns the number written.

        Raises RuntimeError: the log is closed. TypeError: a record JSON cannot encode (nothing is written).
        """
        if self._fh is None:
            raise RuntimeError(f"log {self.path} is closed")
        lines = [json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n" for r in records]
        if not lines:
            return 0
        self._fh.write(b"".join(lines))
        self._fh.flush()
        if self.fsync:
            os.fsync(self._fh.fileno())
        return len(lines)

    def read(self) -> Iterator[Tuple[int, Dict[str, Any]]]:
        """Yield ``(line number, record)`` for every line that parses as a JSON object, in file order; other lines
        are skipped with a warning and counted in ``corrupt_lines``. Reads the file as it is (call :meth:`repair`
        first to drop a torn tail; an unterminated last line that parses is yielded)."""
        self.corrupt_lines = 0
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    record = json.loads(line)
                    if not isinstance(record, dict):
                        raise ValueError(f"not a JSON object: {type(record).__name__}")
                except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
                    self.corrupt_lines += 1
                    logger.warning("log %s line %d skipped: %s", self.path, lineno, exc)
                    continue
                yield lineno, record


# ------------------------------------------------------------------------------------ the replay buffer's records
def rollout_record(rollout_dict: Dict[str, Any], learner_version: int) -> Dict[str, Any]:
    """``{"type": "rollout", ...}``: a rollout accepted while the buffer was at ``learner_version``."""
    return {"type": "rollout", "learner_version": int(learner_version), "rollout": rollout_dict}


def consumed_record(rollout_uids: List[str], learner_version: int) -> Dict[str, Any]:
    """``{"type": "consumed", ...}``: rollouts handed out in a batch taken at ``learner_version`` (trained into
    ``learner_version + 1``)."""
    return {"type": "consumed", "learner_version": int(learner_version), "rollout_uids": list(rollout_uids)}


def reload_record(learner_version: int) -> Dict[str, Any]:
    """``{"type": "reload", ...}``: the buffer was rebuilt for a learner restored at ``learner_version``; versions
    above it written before this record belong to a lost line of weights."""
    return {"type": "reload", "learner_version": int(learner_version)}


@dataclass
class LogScan:
    """What :func:`scan_replay_log` found (counts are of rollout records unless said otherwise).

    ``candidates`` (uid -> rollout dict, log order) have ``lowest <= policy_version <= learner_version`` and are
    neither duplicates nor from a lost line; ``committed`` uids were consumed into a version ``<= learner_version``
    of the surviving line (not to be handed out again); ``uncommitted`` uids were consumed only by a lost step.
    """

    candidates: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    committed: Set[str] = field(default_factory=set)
    uncommitted: Set[str] = field(default_factory=set)
    stale: int = 0
    future_version: int = 0
    lost_line: int = 0
    duplicates: int = 0
    corrupt: int = 0


def scan_replay_log(records: Iterable[Tuple[int, Dict[str, Any]]], learner_version: int, lowest: int) -> LogScan:
    """Replay the records of a replay-buffer log for a learner restored at ``learner_version``.

    Rules (see :mod:`verl.async_rl.replay_buffer`, "Crash recovery"): a ``reload`` record at version ``c_r`` voids
    the earlier rollouts with ``policy_version > c_r`` and the earlier consumptions at ``learner_version >= c_r``
    (both belong to weights the restart threw away, whose version numbers are reused afterwards). At the end a
    consumption at version ``< learner_version`` is committed, one at ``>= learner_version`` is not. A record that
    lacks a field or has an unknown type is counted in ``corrupt`` and skipped (with a warning); nothing raises.
    """
    scan = LogScan()
    consumed: Dict[str, Set[int]] = {}
    for lineno, record in records:
        try:
            kind = record["type"]
            if kind == "consumed":
                at = int(record["learner_version"])
                for uid in record["rollout_uids"]:
                    consumed.setdefault(str(uid), set()).add(at)
            elif kind == "reload":
                c_r = int(record["learner_version"])
                lost = [u for u, d in scan.candidates.items() if d["metadata"]["policy_version"] > c_r]
                for uid in lost:
                    del scan.candidates[uid]
                scan.lost_line += len(lost)
                for versions in consumed.values():
                    versions.difference_update([v for v in versions if v >= c_r])
            elif kind == "rollout":
                data = record["rollout"]
                uid, version = str(data["rollout_uid"]), data["metadata"]["policy_version"]
                if not _is_int(version):
                    raise ValueError(f"policy_version {version!r}")
                if version > learner_version:
                    scan.future_version += 1
                elif version < lowest:
                    scan.stale += 1
                elif uid in scan.candidates:
                    scan.duplicates += 1
                else:
                    scan.candidates[uid] = data
            else:
                raise ValueError(f"unknown record type {kind!r}")
        except (ValueError, KeyError, TypeError) as exc:
            scan.corrupt += 1
            logger.warning("replay log line %d skipped: %s", lineno, exc)
    for uid, versions in consumed.items():
        if any(v < learner_version for v in versions):
            scan.committed.add(uid)
        elif versions:
            scan.uncommitted.add(uid)
    return scan
