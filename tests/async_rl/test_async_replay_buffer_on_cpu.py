"""Async-RL ReplayBuffer: versions, groups, the crash-safe log and its reload, metrics (specs/async_rl.md)."""

from __future__ import annotations

import json
import logging

import pytest

from verl.async_rl import rollout_log
from verl.async_rl.replay_buffer import ReplayBuffer


def _log_records(buf):
    return [json.loads(line) for line in buf.log_path.read_bytes().splitlines()]


def test_stale_dropped_on_set_version_and_on_add(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path, max_age=1, min_group_size=2)
    for _ in range(2):
        assert buf.add(make_rollout(problem_id="p", version=0), learner_version=0)
    assert buf.set_version(1) == 0 and len(buf) == 2  # lag 1 <= max_age: kept
    assert buf.set_version(2) == 2 and len(buf) == 0  # lag 2 > max_age: evicted
    assert buf.ready_groups() == []
    result = buf.add(make_rollout(version=0))
    assert not result and result.reason == "stale"
    assert buf.add(make_rollout(version=1)).accepted  # lag 1 still accepted
    metrics = buf.metrics()
    assert metrics["replays/a/evicted_stale"] == 2 and metrics["replays/a/rejected/stale"] == 1
    with pytest.raises(ValueError, match="never go back"):
        buf.set_version(1)


def test_newer_than_learner_rejected_and_learner_version_advances(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path, version=1)
    result = buf.add(make_rollout(version=2))
    assert (result.accepted, result.reason) == (False, "future_version")
    assert len(buf) == 0 and _log_records(buf) == []  # a rejected rollout is not logged
    assert buf.add(make_rollout(version=2), learner_version=2).accepted  # the caller's newer version advances it
    assert buf.current_version == 2
    assert buf.add(make_rollout(version=2), learner_version=0).accepted  # an older caller view never goes back
    assert buf.current_version == 2


def test_min_group_size_gating(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path, min_group_size=3)
    for reward in (1.0, 0.0):
        buf.add(make_rollout(problem_id="p", reward=reward))
    assert buf.ready_groups() == [] and buf.take_groups(10_000) == []
    buf.add(make_rollout(problem_id="p", reward=0.0))
    (group,) = buf.take_groups(10_000)
    assert len(group) == 3 and [r.reward for r in group.rollouts] == [1.0, 0.0, 0.0]  # in arrival order
    assert len(buf) == 0


def test_versions_of_one_problem_are_different_groups_newest_first(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path, max_age=1, version=1)
    for version in (0, 0, 1, 1, 1):
        buf.add(make_rollout(problem_id="p", version=version))
    for _ in range(2):
        buf.add(make_rollout(problem_id="q", version=1))
    keys = [(g.key, len(g)) for g in buf.ready_groups()]
    assert keys == [(("p", 1), 3), (("q", 1), 2), (("p", 0), 2)]
    assert next(g.key for g in buf.ready_groups(newest_first=False)) == ("p", 0)
    # token budget: each rollout has 5 tokens; 12 tokens fit the p/1 group only (15 > 12), then q/1 (10 <= 12)
    assert [g.key for g in buf.take_groups(12)] == [("q", 1)]
    assert sorted(g.key for g in buf.ready_groups()) == [("p", 0), ("p", 1)]


def test_duplicates_and_contract_violations(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path)
    r = make_rollout(uid="same")
    assert buf.add(r).accepted
    assert buf.add(r).reason == "duplicate"
    results = buf.add_many([make_rollout(uid="x"), make_rollout(uid="x")])
    assert [x.reason for x in results] == ["accepted", "duplicate"]
    with pytest.raises(ValueError, match="env"):
        buf.add(make_rollout(env="b"))
    bad = make_rollout()
    no_logprobs = type(bad)(
        bad.environment,
        bad.problem_id,
        "nolp",
        [bad.turns[0], type(bad.turns[1])("a", "assistant", (1, 2))],
        bad.metadata,
    )
    with pytest.raises(ValueError, match="logprobs"):
        buf.add_many([make_rollout(), no_logprobs])  # validated before anything is logged
    assert len(_log_records(buf)) == 2 and len(buf) == 2


def test_log_written_and_fsynced_before_accepting(tmp_path, make_rollout, monkeypatch):
    calls = []
    real_fsync = rollout_log.os.fsync
    monkeypatch.setattr(rollout_log.os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd)))
    buf = ReplayBuffer("a", tmp_path)
    calls.clear()
    buf.add(make_rollout(uid="u1"))
    assert len(calls) == 1 and _log_records(buf)[-1]["rollout"]["rollout_uid"] == "u1"
    buf.add_many([make_rollout(), make_rollout(), make_rollout(problem_id="p0")])
    assert len(calls) == 2  # one fsync per batch
    buf.take_groups(10_000)
    assert len(calls) == 3 and _log_records(buf)[-1]["type"] == "consumed"


def test_reload_after_crash_torn_line(tmp_path, make_rollout, caplog):
    buf = ReplayBuffer("a", tmp_path, max_age=1)
    first = [make_rollout(problem_id="p", reward=r) for r in (1.0, 0.0)]
    second = [make_rollout(problem_id="q", reward=r) for r in (1.0, 0.0, 1.0)]
    buf.add_many(first + second)
    (taken,) = buf.take_groups(first[0].num_tokens * 2)  # the oldest group fits the budget: p
    assert taken.problem_id == "p"
    torn = make_rollout(problem_id="q", uid="torn")
    buf.add(torn)
    buf.close()
    data = buf.log_path.read_bytes()
    buf.log_path.write_bytes(data[: len(data) - 40])  # crash in the middle of the last line

    caplog.set_level(logging.WARNING)
    new = ReplayBuffer("a", tmp_path, max_age=1)  # a restarted process; the learner checkpointed version 1
    report = new.reload(learner_version=1)
    assert "torn" in caplog.text and report.torn_bytes > 0
    assert (report.restored, report.consumed, report.reoffered) == (3, 2, 0)
    assert {r.rollout_uid for g in new.ready_groups() for r in g.rollouts} == {r.rollout_uid for r in second}
    (group,) = new.take_groups(10_000)  # consumed rollouts are not handed out again
    assert group.problem_id == "q" and len(group) == 3
    assert new.add(first[0]).reason == "duplicate"  # a resend of a consumed rollout
    assert new.add(torn).accepted  # the torn one was never stored: the env may resend it
    assert buf.log_path.read_bytes().endswith(b"\n")

    again = ReplayBuffer("a", tmp_path, max_age=1)  # a second restart, still from the version-1 checkpoint
    report = again.reload(learner_version=1)
    assert report.corrupt_lines == 0 and report.torn_bytes == 0  # no record glued onto the torn one
    # p was trained into version 1; q was taken at version 1 (a step the restart lost): offered again, with "torn"
    assert (report.consumed, report.reoffered, report.restored, len(again)) == (2, 3, 4, 4)


def test_reload_reoffers_a_lost_step_and_skips_garbage(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path)
    buf.add_many([make_rollout(problem_id="p") for _ in range(2)])
    buf.take_groups(10_000)  # taken at version 0, then the learner crashed before checkpointing version 1
    with open(buf.log_path, "ab") as f:
        f.write(b"{not json}\n[1, 2]\n")
    buf.close()
    new = ReplayBuffer("a", tmp_path)
    report = new.reload(learner_version=0)
    assert (report.reoffered, report.restored, report.consumed, report.corrupt_lines) == (2, 2, 0, 2)
    assert len(new.take_groups(10_000)) == 1


def test_reload_ignores_rollouts_of_discarded_weights(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path, min_group_size=1, version=1)
    buf.add(make_rollout(uid="old-v1", version=1))  # generated by version-1 weights that will be lost
    buf.close()
    buf = ReplayBuffer("a", tmp_path, min_group_size=1)
    report = buf.reload(learner_version=0)  # learner restarted from version 0
    assert report.future_version == 1 and len(buf) == 0
    buf.set_version(1)  # a new version 1, different weights
    buf.add(make_rollout(uid="new-v1", version=1))
    buf.close()
    buf = ReplayBuffer("a", tmp_path, min_group_size=1)
    report = buf.reload(learner_version=1)
    assert report.lost_line == 1 and report.restored == 1
    assert [r.rollout_uid for g in buf.ready_groups() for r in g.rollouts] == ["new-v1"]


def test_metrics_names_and_values(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path, max_age=1, version=1)
    buf.add(make_rollout(problem_id="p", version=1, reward=1.0, truncated=True, rewards={"acc": 1.0}))
    buf.add(make_rollout(problem_id="p", version=1, reward=0.0, tool=4, rewards={"acc": 0.0}))
    buf.add(make_rollout(problem_id="q", version=0, reward=0.5))
    buf.add(make_rollout(problem_id="q", version=0, reward=0.5))
    buf.add(make_rollout(version=5))  # rejected
    m = buf.metrics(reset=False)
    p = "replays/a/"
    assert m[p + "rollouts_in_buffer"] == 4 and m[p + "new_rollouts"] == 4
    assert m[p + "new_tokens"] == 5 + 11 + 5 + 5 and m[p + "new_generated_tokens"] == 2 + 4 + 2 + 2
    assert m[p + "tokens_in_buffer"] == 26 and m[p + "frac_on_policy"] == 0.5
    assert m[p + "reward/mean"] == pytest.approx(0.5) and m[p + "reward/std"] == pytest.approx(0.5**0.5 / 2)
    assert m[p + "frac_truncated"] == 0.25
    assert m[p + "rewards/acc/mean"] == 0.5 and m[p + "rewards/acc/std"] == 0.5
    assert m[p + "version_lag/0"] == 2 and m[p + "version_lag/1"] == 2 and m[p + "rejected/future_version"] == 1
    assert p + "frac_used_in_batch" not in m and p + "used_frac_on_policy" not in m
    buf.take_groups(10)  # only q (10 tokens) fits
    m = buf.metrics()
    assert m[p + "frac_used_in_batch"] == 0.5 and m[p + "used_version_lag/1"] == 2
    assert m[p + "used_frac_on_policy"] == 0.0  # q was generated by the previous policy
    m = buf.metrics()
    assert m[p + "new_rollouts"] == 0 and p + "reward/mean" not in m and p + "used_version_lag/1" not in m
    assert buf.version_lag_histogram(used=True) == {1: 2}
