"""Per-env replay buffer of the asynchronous mode: crash-safe on-disk log, pool of groups, metrics.

Design: ``docs/async.md``, sections "Replay buffer", "Rollout log" and "Metrics" (max age, min group size; after a learner restart the log is reloaded and nothing already written is lost).
Rules pinned here:

* Versions. ``current_version`` is the learner's policy version. A rollout is *rejected* when its ``policy_version``
  is newer than ``current_version`` (reason ``future_version``: the learner restarted from an older checkpoint), or
  older than ``current_version - max_age`` (``stale``), or its ``rollout_uid`` was already accepted (``duplicate``,
  e.g. an env resending after a crash). :meth:`set_version` never goes back; it evicts groups that became stale.
* Groups are keyed by ``(problem_id, policy_version)``: rollouts of one problem from two versions are two groups. A
  group is ready with ``>= min_group_size`` rollouts; handing it out takes all its current members and seals it (a
  rollout of the same key arriving later starts a new group with the same key: an independent sample of the same
  prompt and policy, so its own leave-one-out baseline is still valid).
* Order: ready groups newest version first (``newest_first``), first-created first within a version.
* Log (``{log_dir}/{env_name}.jsonl``, :class:`~verl.async_rl.rollout_log.RolloutLog`: append-only JSON lines,
  flush + fsync before returning). ``{"type": "rollout", "learner_version": v, "rollout": {...}}`` is written before
  :meth:`add` reports the rollout accepted (one fsync per :meth:`add`, one per :meth:`add_many` batch);
  ``{"type": "consumed", "learner_version": v, "rollout_uids": [...]}`` before :meth:`consume` returns the groups.
  Records: :mod:`verl.async_rl.rollout_log`. The log is never compacted (it grows with the run).
* Crash recovery. A torn last line (never acknowledged) is cut off with a warning, an unparsable line is skipped
  with a warning; neither raises. :meth:`reload` with the restored learner version ``c`` rebuilds the pool: a rollout
  consumed while the buffer was at version ``< c`` went into the restored weights (a batch taken at version ``v`` is
  trained into ``v + 1``) and is never handed out again; one consumed at version ``>= c`` belongs to a training step
  the restart lost and is offered again (unless stale). Each rollout uid is restored at most once. Each reload
  appends a ``reload`` record, so a later reload ignores what the discarded weights wrote before it (version numbers
  are reused after a restart): :func:`~verl.async_rl.rollout_log.scan_replay_log`.
* Reward components for ``rewards/{name}/*`` come from ``Rollout.metadata["rewards"]`` (a dict of floats).
* Metrics are reported when a batch is created: :meth:`metrics` returns them and, with ``reset=True``,
  starts a new period for the ``new_*``, reward, rejection and used-lag statistics. Stds are population (ddof 0).
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from verl.async_rl.rollout_log import RolloutLog, consumed_record, reload_record, rollout_record, scan_replay_log
from verl.async_rl.types import Group, Rollout

logger = logging.getLogger(__name__)

__all__ = ["AddResult", "Group", "ReloadReport", "ReplayBuffer"]  # Group is re-exported from types

_ENV_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class AddResult:
    """Outcome of :meth:`ReplayBuffer.add`: ``accepted`` and ``reason`` (``accepted``, ``future_version``,
    ``stale`` or ``duplicate``). Truthy when accepted."""

    accepted: bool
    reason: str

    def __bool__(self) -> bool:
        return self.accepted


@dataclass
class ReloadReport:
    """Counts from :meth:`ReplayBuffer.reload` (rollout records unless said otherwise)."""

    restored: int = 0  # back in the pool (includes ``reoffered``)
    reoffered: int = 0  # consumed at a version >= the restored one (lost training step), offered again
    consumed: int = 0  # trained into the restored weights: not handed out again
    stale: int = 0
    future_version: int = 0
    lost_line: int = 0  # written before an earlier restart, by weights that restart threw away
    duplicates: int = 0
    corrupt_lines: int = 0  # lines that did not parse (skipped)
    torn_bytes: int = 0  # bytes of an unterminated last line cut off


@dataclass
class _PoolGroup:
    seq: int
    rollouts: List[Rollout] = field(default_factory=list)


def _mean_std(values: Sequence[float]) -> Tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)


class ReplayBuffer:
    """Pool of rollouts of one env type (module docstring: rules and log format).

    Args:
        env_name: the env type; rollouts must have ``environment == env_name``; names the log file and metrics.
        log_dir: folder of the append-only log (created if missing).
        max_age: versions a rollout may lag behind ``current_version`` (default 1).
        min_group_size: rollouts a group needs to be handed out (>= 1).
        fsync: fsync every log write (default True); False: flush only.
        version: the initial ``current_version`` (0). After a restart call :meth:`reload` instead.

    Raises ValueError: bad ``env_name`` (must match ``[A-Za-z0-9][A-Za-z0-9_.-]*``), ``max_age < 0`` or
    ``min_group_size < 1``.
    """

    def __init__(
        self,
        env_name: str,
        log_dir: str | os.PathLike,
        max_age: int = 1,
        min_group_size: int = 2,
        *,
        fsync: bool = True,
        version: int = 0,
    ):
        if not _ENV_NAME.match(str(env_name)):
            raise ValueError(f"env_name {env_name!r} must match [A-Za-z0-9][A-Za-z0-9_.-]*")
        if int(max_age) < 0:
            raise ValueError(f"max_age must be >= 0, got {max_age}")
        if int(min_group_size) < 1:
            raise ValueError(f"min_group_size must be >= 1, got {min_group_size}")
        self.env_name = str(env_name)
        self.max_age = int(max_age)
        self.min_group_size = int(min_group_size)
        self.current_version = int(version)
        self._lock = threading.RLock()
        self._groups: Dict[Tuple[str, int], _PoolGroup] = {}
        self._uids: Dict[int, set] = {}  # policy_version -> uids accepted (pool or consumed), non-stale versions only
        self._seq = 0
        self._used_lag_total: Counter = Counter()
        self._reset_period()
        self._last_frac_used: Optional[float] = None
        self._log = RolloutLog(Path(log_dir) / f"{self.env_name}.jsonl", fsync=fsync)
        self.log_path = self._log.path

    def close(self) -> None:
        """Close the log file (the buffer can no longer accept or hand out rollouts)."""
        with self._lock:
            self._log.close()

    def __enter__(self) -> "ReplayBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --------------------------------------------------------------------------------------------------- adding
    def _validate(self, rollout: Rollout) -> Rollout:
        if not isinstance(rollout, Rollout):
            raise TypeError(f"expected a Rollout, got {type(rollout).__name__}")
        if rollout.environment != self.env_name:
            raise ValueError(
                f"rollout {rollout.rollout_uid!r} is from env {rollout.environment!r}, this buffer is {self.env_name!r}"
            )
        _ = rollout.policy_version  # raises ValueError when missing or not an int
        if rollout.num_tokens == 0:
            raise ValueError(f"rollout {rollout.rollout_uid!r} has no tokens")
        for i, turn in enumerate(rollout.turns):
            if turn.is_generated and turn.tokens and turn.logprobs is None:
                raise ValueError(
                    f"rollout {rollout.rollout_uid!r} turn {i} ({turn.role}) has tokens but no logprobs; the learner "
                    "needs the inference policy's log-probs"
                )
        return rollout

    def _known_uid(self, uid: str) -> bool:
        return any(uid in uids for uids in self._uids.values())

    def add(self, rollout: Rollout, learner_version: Optional[int] = None) -> AddResult:
        """Offer one rollout; logged (flush + fsync) before it counts as accepted.

        Args: ``learner_version``: the learner's version as the caller knows it; a newer one than
            ``current_version`` advances the buffer (:meth:`set_version`), an older one is ignored (the buffer's
            version never goes back).
        Returns: :class:`AddResult`. Raises ValueError / TypeError: the rollout breaks the contract (another env,
            no ``policy_version``, no tokens, a generated turn without log-probs).
        """
        return self.add_many([rollout], learner_version)[0]

    def add_many(self, rollouts: Sequence[Rollout], learner_version: Optional[int] = None) -> List[AddResult]:
        """Offer several rollouts; the accepted ones are logged with one write and one fsync, then pooled.

        Validates all rollouts before logging any (a contract violation raises and nothing is added).
        """
        with self._lock:
            versions = [self._validate(r).policy_version for r in rollouts]
            if learner_version is not None and int(learner_version) > self.current_version:
                self.set_version(int(learner_version))
            results, accepted, batch_uids = [], [], set()
            lowest = self.current_version - self.max_age
            for rollout, version in zip(rollouts, versions):
                if version > self.current_version:
                    reason = "future_version"
                elif version < lowest:
                    reason = "stale"
                elif rollout.rollout_uid in batch_uids or self._known_uid(rollout.rollout_uid):
                    reason = "duplicate"
                else:
                    reason = "accepted"
                    batch_uids.add(rollout.rollout_uid)
                    accepted.append(rollout)
                if reason != "accepted":
                    self._rejected[reason] += 1
                results.append(AddResult(reason == "accepted", reason))
            self._log.append(rollout_record(r.to_dict(), self.current_version) for r in accepted)
            for rollout in accepted:
                self._insert(rollout)
                self._new.append(rollout)
            return results

    def _insert(self, rollout: Rollout) -> None:
        key = (rollout.problem_id, rollout.policy_version)
        group = self._groups.get(key)
        if group is None:
            self._seq += 1
            group = self._groups[key] = _PoolGroup(seq=self._seq)
        group.rollouts.append(rollout)
        self._uids.setdefault(rollout.policy_version, set()).add(rollout.rollout_uid)

    # ------------------------------------------------------------------------------------------------- versions
    def set_version(self, version: int) -> int:
        """Advance ``current_version`` to ``version`` and evict groups older than ``version - max_age``.

        Returns: the number of rollouts evicted. Raises ValueError: ``version < current_version`` (use
        :meth:`reload` after a learner restart).
        """
        with self._lock:
            version = int(version)
            if version < self.current_version:
                raise ValueError(
                    f"{self.env_name}: policy version {version} < current {self.current_version}; versions never go "
                    "back (call reload() after a learner restart)"
                )
            self.current_version = version
            evicted = self._evict_stale()
            self._evicted += evicted
            return evicted

    def _evict_stale(self) -> int:
        lowest = self.current_version - self.max_age
        evicted = 0
        for key in [k for k in self._groups if k[1] < lowest]:
            evicted += len(self._groups.pop(key).rollouts)
        for version in [v for v in self._uids if v < lowest]:
            del self._uids[version]
        return evicted

    # -------------------------------------------------------------------------------------------- handing out
    def ready_groups(self, newest_first: bool = True) -> List[Group]:
        """Snapshot of the ready groups (``>= min_group_size`` rollouts), in hand-out order:
        policy version descending (ascending with ``newest_first=False``), then first-created first."""
        with self._lock:
            ready = [(k, g) for k, g in self._groups.items() if len(g.rollouts) >= self.min_group_size]
            sign = -1 if newest_first else 1
            ready.sort(key=lambda kg: (sign * kg[0][1], kg[1].seq))
            return [Group(self.env_name, k[0], k[1], tuple(g.rollouts)) for k, g in ready]

    def consume(self, groups: Sequence[Group]) -> List[Group]:
        """Hand out ``groups`` (snapshots from :meth:`ready_groups`): log a ``consumed`` record (flush + fsync),
        remove their rollouts from the pool. The learner's estimator computes the advantages (``algorithm.adv_estimator``,
        each group one ``uid``).

        Returns: the groups. Raises KeyError: a rollout of a group is no longer in the pool (already consumed or
        evicted); nothing is consumed then.
        """
        with self._lock:
            members: Dict[Tuple[str, int], set] = {}
            for group in groups:
                pool = self._groups.get(group.key)
                present = {r.rollout_uid for r in pool.rollouts} if pool is not None else set()
                uids = {r.rollout_uid for r in group.rollouts}
                if not uids <= present or uids & members.get(group.key, set()):
                    raise KeyError(f"{self.env_name}: group {group.key} is not (wholly) in the buffer any more")
                members.setdefault(group.key, set()).update(uids)
            out = list(groups)
            pool_before = self._num_rollouts()
            taken = [r.rollout_uid for g in groups for r in g.rollouts]
            if not taken:
                return out
            self._log.append([consumed_record(taken, self.current_version)])
            for key, uids in members.items():
                pool = self._groups[key]
                pool.rollouts = [r for r in pool.rollouts if r.rollout_uid not in uids]
                if not pool.rollouts:
                    del self._groups[key]
            for group in groups:
                lag = self.current_version - group.policy_version
                self._used_lag[lag] += len(group)
                self._used_lag_total[lag] += len(group)
            self._last_frac_used = len(taken) / pool_before
            return out

    def take_groups(self, max_tokens: int, newest_first: bool = True) -> List[Group]:
        """Hand out ready groups, in :meth:`ready_groups` order, first-fit within ``max_tokens`` tokens (a group that
        does not fit the remaining budget is skipped and a later, smaller one may still be taken).

        Returns: the groups (possibly empty).
        """
        with self._lock:
            chosen, left = [], int(max_tokens)
            for group in self.ready_groups(newest_first):
                if group.num_tokens <= left:
                    chosen.append(group)
                    left -= group.num_tokens
            return self.consume(chosen)

    # ---------------------------------------------------------------------------------------------- recovery
    def reload(self, learner_version: int) -> ReloadReport:
        """Rebuild the pool from the log after a restart (module docstring, "Crash recovery").

        Args: ``learner_version``: the policy version of the restored learner; becomes ``current_version``.
        Returns: :class:`ReloadReport`. Never raises on a torn or corrupt line (warns and skips).
        """
        with self._lock:
            self._log.close()
            torn_at_open, self._log.torn_bytes = self._log.torn_bytes, 0
            self._log.open()  # cuts a torn tail off before reading
            version = int(learner_version)
            scan = scan_replay_log(self._log.read(), version, version - self.max_age)
            report = ReloadReport(
                stale=scan.stale,
                future_version=scan.future_version,
                lost_line=scan.lost_line,
                duplicates=scan.duplicates,
                corrupt_lines=scan.corrupt + self._log.corrupt_lines,
                torn_bytes=torn_at_open + self._log.torn_bytes,
            )
            self._groups, self._uids, self._seq = {}, {}, 0
            self.current_version = version
            self._reset_period()
            self._last_frac_used = None
            for uid, data in scan.candidates.items():
                try:
                    rollout = self._validate(Rollout.from_dict(data))
                except (ValueError, KeyError, TypeError) as exc:
                    report.corrupt_lines += 1
                    logger.warning("replay log %s: rollout %r skipped: %s", self.log_path, uid, exc)
                    continue
                if uid in scan.committed:
                    report.consumed += 1
                    self._uids.setdefault(rollout.policy_version, set()).add(uid)
                else:
                    self._insert(rollout)
                    report.restored += 1
                    report.reoffered += uid in scan.uncommitted
            self._log.append([reload_record(version)])
            logger.info("replay buffer %s reloaded at version %d: %s", self.env_name, version, report)
            return report

    # ------------------------------------------------------------------------------------------------ metrics
    def _reset_period(self) -> None:
        self._new: List[Rollout] = []
        self._rejected: Counter = Counter()
        self._used_lag: Counter = Counter()
        self._evicted = 0

    def _num_rollouts(self) -> int:
        return sum(len(g.rollouts) for g in self._groups.values())

    def __len__(self) -> int:
        """Rollouts in the pool."""
        with self._lock:
            return self._num_rollouts()

    def version_lag_histogram(self, used: bool = False) -> Dict[int, int]:
        """Staleness distribution: ``{current_version - policy_version: rollouts}`` of the pool, or with
        ``used=True`` of every rollout this object handed out (lag at hand-out time, over its whole life)."""
        with self._lock:
            if used:
                return dict(sorted(self._used_lag_total.items()))
            hist: Counter = Counter()
            for (_, version), group in self._groups.items():
                hist[self.current_version - version] += len(group.rollouts)
            return dict(sorted(hist.items()))

    def metrics(self, reset: bool = True) -> Dict[str, float]:
        """The ``replays/{env}/...`` metrics plus staleness (``docs/async.md``, section "Metrics").

        Pool state: ``rollouts_in_buffer``, ``tokens_in_buffer``, ``frac_on_policy`` (rollouts of
        ``current_version`` / pool; 0 when empty), ``ready_groups``, ``policy_version``, ``version_lag/{k}``.
        Since the last reset: ``new_rollouts``, ``new_tokens`` (prompt + generated), ``new_generated_tokens``,
        ``evicted_stale``, ``rejected/{reason}``, ``used_version_lag/{k}`` (lag of the rollouts handed out),
        ``used_frac_on_policy`` (of the rollouts handed out, those generated by the current policy: lag 0) and,
        when there were new rollouts, ``reward/mean|std``, ``frac_truncated``, ``rewards/{name}/mean|std``.
        ``frac_used_in_batch``: rollouts handed out by the latest :meth:`consume` / pool size just before it
        (absent before the first hand-out).
        """
        with self._lock:
            p = f"replays/{self.env_name}/"
            pool = [r for g in self._groups.values() for r in g.rollouts]
            on_policy = sum(r.policy_version == self.current_version for r in pool)
            out: Dict[str, float] = {
                p + "rollouts_in_buffer": float(len(pool)),
                p + "tokens_in_buffer": float(sum(r.num_tokens for r in pool)),
                p + "frac_on_policy": on_policy / len(pool) if pool else 0.0,
                p + "ready_groups": float(sum(len(g.rollouts) >= self.min_group_size for g in self._groups.values())),
                p + "policy_version": float(self.current_version),
                p + "new_rollouts": float(len(self._new)),
                p + "new_tokens": float(sum(r.num_tokens for r in self._new)),
                p + "new_generated_tokens": float(sum(r.num_generated_tokens for r in self._new)),
                p + "evicted_stale": float(self._evicted),
            }
            for lag, count in self.version_lag_histogram().items():
                out[f"{p}version_lag/{lag}"] = float(count)
            for lag, count in sorted(self._used_lag.items()):
                out[f"{p}used_version_lag/{lag}"] = float(count)
            if self._used_lag:
                out[p + "used_frac_on_policy"] = self._used_lag.get(0, 0) / sum(self._used_lag.values())
            for reason, count in sorted(self._rejected.items()):
                out[f"{p}rejected/{reason}"] = float(count)
            if self._new:
                out[p + "reward/mean"], out[p + "reward/std"] = _mean_std([r.reward for r in self._new])
                out[p + "frac_truncated"] = sum(r.truncated for r in self._new) / len(self._new)
                named: Dict[str, List[float]] = {}
                for rollout in self._new:
                    for name, value in rollout.rewards.items():
                        named.setdefault(name, []).append(value)
                for name, values in sorted(named.items()):
                    out[f"{p}rewards/{name}/mean"], out[f"{p}rewards/{name}/std"] = _mean_std(values)
            if self._last_frac_used is not None:
                out[p + "frac_used_in_batch"] = self._last_frac_used
            if reset:
                self._reset_period()
            return out
